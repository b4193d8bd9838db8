// Package lower is what the main roles that put a device of a master
// ("lower") interface into the pod share: macvlan and ipvlan. The device is
// created directly in the pod's namespace under CNI_IFNAME, on a master of
// the node (or, with linkInContainer, of the pod), gets the addresses and
// routes from IPAM and an endpoint record in the store before any kernel
// work. A role is a Spec: its kind, modes and what of the config it reads
// (Macvlan and Ipvlan are the two in kinds.go).
package lower
