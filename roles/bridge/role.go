package bridge

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Role is the "bridge" role.
var Role = New("bridge", "bridge connects the pod to a Linux bridge on the node with a veth pair: the pod end is CNI_IFNAME, "+
	"the host end joins the bridge (default cni0). Addresses and routes come from the ipam section; "+
	"isGateway puts the gateway address on the bridge and ipMasq masquerades the pod's traffic with nftables.", Conf{})

// New returns a bridge role under another name with other defaults (the
// azure-vnet drop-in uses it with bridge azure0, through NewWithHooks).
func New(name, about string, defaults Conf) *cniplug.Role {
	parse := func(a *cniplug.Args) (*Conf, error) { return parseConf(a, defaults) }
	return &cniplug.Role{
		Name:   name,
		About:  about,
		Add:    cniplug.AddWithConf(parse, add),
		Del:    cniplug.WithConf(parse, attach.OnHost(del)),
		Check:  cniplug.WithConf(parse, check),
		GC:     cniplug.WithConf(parse, attach.OnHost(gc)),
		Status: attach.Status,
	}
}
