// Package ptp is the "ptp" main plugin: a veth pair per attachment, the pod
// end named CNI_IFNAME with the addresses from IPAM, the host end with the
// gateway address as a /32 (or /128) and a host route to each pod address,
// the reference plugin's point-to-point layout. Every packet of the pod goes
// through the node's routing; ipMasq masquerades it with nftables. It
// writes an endpoint record to the store for every attachment.
package ptp
