// Package macvlan is the "macvlan" main plugin: a macvlan device on a
// master interface of the node (default: the interface of the default
// route), created in the pod as CNI_IFNAME with its own MAC, the addresses
// and routes from IPAM, announced with gratuitous ARP and unsolicited
// neighbour advertisements. The pod appears on the master's LAN as a host
// of its own.
package macvlan

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// Role is the "macvlan" role.
var Role = &cniplug.Role{
	Name: "macvlan",
	About: "macvlan puts a macvlan device of a node interface (\"master\", default: the interface of the " +
		"default route; with \"linkInContainer\", an interface of the pod) into the pod as CNI_IFNAME, with its own MAC " +
		"(\"mac\" or the mac capability) and the addresses and routes from the ipam section: the pod is a host of the " +
		"master's LAN. \"mode\" is bridge (default), private, vepa, passthru or source.",
	Verbs: &lower.MacvlanVerbs,

	Known: &known,
}
