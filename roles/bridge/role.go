package bridge

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// Role is the "bridge" role.
var Role = New("bridge", "bridge connects the pod to a Linux bridge on the node with a veth pair: the pod end is CNI_IFNAME, "+
	"the host end joins the bridge (default cni0). Addresses and routes come from the ipam section; "+
	"isGateway puts the gateway address on the bridge and ipMasq masquerades the pod's traffic with nftables.", Conf{})

// New returns a bridge role under another name with other defaults (the
// azure-vnet drop-in uses it with bridge azure0).
func New(name, about string, defaults Conf) *cniplug.Role {
	return &cniplug.Role{
		Name:  name,
		About: about,
		Add: func(ctx context.Context, a *cniplug.Args) (types.Result, error) {
			return add(ctx, a, defaults)
		},
		Del:    func(ctx context.Context, a *cniplug.Args) error { return del(ctx, a, defaults) },
		Check:  func(ctx context.Context, a *cniplug.Args) error { return check(ctx, a, defaults) },
		GC:     func(ctx context.Context, a *cniplug.Args) error { return gc(ctx, a, defaults) },
		Status: status,
	}
}

// status is ready when the IPAM plugin is.
func status(ctx context.Context, a *cniplug.Args) error {
	if a.Conf.IPAM.Type == "" {
		return nil
	}
	return a.DelegateStatus(ctx, a.Conf.IPAM.Type, a.StdinData)
}
