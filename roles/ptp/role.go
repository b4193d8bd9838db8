package ptp

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Role is the "ptp" role.
var Role = &cniplug.Role{
	Name: "ptp",
	About: "ptp connects the pod to the node with a veth pair and no bridge: the pod end is CNI_IFNAME with the " +
		"addresses from the ipam section, the host end gets the gateway address as a /32 (/128) and the node a " +
		"host route to each pod address; the pod reaches everything through the gateway. ipMasq masquerades the " +
		"pod's traffic with nftables.",
	Verbs: &attach.HostVerbs[*Conf]{Parse: parseConf, Add: add, Check: check, Del: del, GC: gc},

	Known: &known,
}
