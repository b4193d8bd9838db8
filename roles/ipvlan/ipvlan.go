// Package ipvlan is the "ipvlan" main plugin: an ipvlan device on a master
// interface of the node (default: the interface of the default route; in a
// chain, the single interface of prevResult), created in the pod as
// CNI_IFNAME. It shares the master's MAC; the pod has its own addresses
// (from IPAM, or prevResult's in a chain) and routes. Modes l2, l3, l3s.
package ipvlan

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// Role is the "ipvlan" role.
var Role = &cniplug.Role{
	Name: "ipvlan",
	About: "ipvlan puts an ipvlan device of a node interface (\"master\", default: the interface of the " +
		"default route, or in a chain the single interface of prevResult; with \"linkInContainer\", an interface of the " +
		"pod) into the pod as CNI_IFNAME, sharing the master's MAC, with the addresses and routes from the ipam section " +
		"(or prevResult's). \"mode\" is l2 (default), l3 or l3s.",
	Verbs: &lower.IpvlanVerbs,

	Known: &known,
}
