package cloudipam

import (
	"context"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// poolsField names the cached pools in the allocator's messages.
const poolsField = "cloud pools"

func add(ctx context.Context, a *cniplug.Args, provider string) (types.Result, error) {
	c, err := loadConfig(a, provider)
	if err != nil {
		return nil, err
	}
	requested, err := a.RequestedIPs()
	if err != nil {
		return nil, err
	}
	req := ipam.Request{
		Network:     c.Network,
		ContainerID: a.ContainerID,
		IfName:      a.IfName,
		Pod:         a.CNIArgs.Pod(),
		Requested:   requested,
		Sticky:      c.Sticky,
	}
	var allocs []ipam.Allocation
	err = withPools(ctx, a, c, func(tx *store.IPAMTx, cache *store.CloudCache) (err error) {
		allocs, err = ipam.AllocatePools(tx, req, poolsField, pools(c, cache))
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: c.DNS}
	for _, al := range allocs {
		res.IPs = append(res.IPs, &current.IPConfig{
			Address: net.IPNet{IP: al.Addr.Addr().AsSlice(), Mask: net.CIDRMask(al.Addr.Bits(), al.Addr.Addr().BitLen())},
			Gateway: al.Gateway.AsSlice(),
		})
	}
	res.Routes = c.Routes
	if res.Routes == nil {
		// As Azure's IPAM does: a default route via the subnet's gateway.
		for _, al := range allocs {
			dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if al.Addr.Addr().Is6() {
				dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			res.Routes = append(res.Routes, &types.Route{
				Dst: net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(0, dst.Addr().BitLen())},
				GW:  al.Gateway.AsSlice(),
			})
		}
	}
	return res, nil
}
