package whereabouts

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// check asks the agent whether the attachment still holds an address of
// every range (in the pools), and, with a previous result, that those are
// the ones in it.
func check(ctx context.Context, a *cniplug.Args, cfg *config) error {
	if len(cfg.Ranges) == 0 {
		return nil
	}
	_, resp, err := cfg.ask(ctx, a, agentapi.OpIPAMCheck, 0, nil)
	if err != nil {
		return agentErr(cfg, "check the reservation", err)
	}
	prev, err := a.Conf.PrevResult()
	if err != nil || prev == nil {
		return err
	}
	for _, s := range resp.IPs {
		p, _ := netip.ParsePrefix(s)
		found := false
		for _, ip := range prev.IPs {
			got, ok := netip.AddrFromSlice(ip.Address.IP)
			found = found || (ok && got.Unmap() == p.Addr())
		}
		if !found {
			return cniplug.Errorf(types.ErrUnknownContainer, "whereabouts: the pool holds %s for container %s interface %s, but the previous result does not have it: run DEL and ADD again", p.Addr(), a.ContainerID, a.IfName)
		}
	}
	return nil
}

// status reports whether the agent can allocate on the network (it reaches
// the API server or etcd and has read the pools).
func status(ctx context.Context, _ *cniplug.Args, cfg *config) error {
	req := &agentapi.IPAMRequest{Network: cfg.Network, NetworkName: cfg.NetworkName}
	if _, err := (&agentapi.Client{Socket: cfg.Socket}).IPAM(ctx, agentapi.OpIPAMStatus, req); err != nil {
		return cniplug.Errorf(cniplug.CodeNotReady, "whereabouts: cluster IPAM not ready: %v", err)
	}
	return nil
}
