// Package attach is what the main roles that give a pod one interface share
// (bridge, ptp, macvlan, ipvlan): the IPAM call and the endpoint record
// written in one store transaction before any kernel work, their release on
// DEL, the veth's names, creation and removal, the checks of CHECK against
// prevResult, the masquerade entries of ipMasq, and GC of the endpoint
// records.
package attach
