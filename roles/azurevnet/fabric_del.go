package azurevnet

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/store"
)

// detachFabric (bridge mode) removes the pod's addresses from the fabric rules.
func detachFabric(_ context.Context, _ *cniplug.Args, _ *bridge.Conf, host *netops.Handle, ips []netip.Addr) error {
	if err := host.NFT().DeleteFabricPods(ips); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "azure-vnet: %w", err)
	}
	return nil
}

// gcFabric (bridge mode) removes fabric entries of pods that are not kept: those of stale
// records, and any other in the network's subnets that no kept record has;
// and the source address checks of transparent host ends that are gone
// (made before the config changed mode; the bridge role's GC removes
// those of bridge ports).
func gcFabric(_ context.Context, a *cniplug.Args, _ *bridge.Conf, host *netops.Handle, eps []store.Endpoint) error {
	if err := gcSourceChecks(host, a, nft.SrcCheckRouted); err != nil {
		return err
	}
	keep := map[netip.Addr]bool{}
	var subnets []netip.Prefix
	for _, ep := range eps {
		kept := a.Conf.Keeps(ep.ContainerID, ep.IfName)
		for _, p := range ep.IPs {
			subnets = append(subnets, p.Masked())
			if kept {
				keep[p.Addr()] = true
			}
		}
	}
	have, err := host.NFT().FabricPods()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	var drop []netip.Addr
	for ip := range have {
		if keep[ip] {
			continue
		}
		for _, s := range subnets {
			if s.Contains(ip) {
				drop = append(drop, ip)
				break
			}
		}
	}
	if len(drop) == 0 {
		return nil
	}
	if err := host.NFT().DeleteFabricPods(drop); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "azure-vnet GC: %w", err)
	}
	return nil
}
