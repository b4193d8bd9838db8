// Package bridge is the "bridge" main plugin: a veth pair per attachment, the
// pod end named CNI_IFNAME inside the pod, the host end on a Linux bridge,
// addresses and routes from IPAM, the bridge as gateway and masquerade with
// nftables when asked. It writes an endpoint record to the store for every
// attachment.
package bridge
