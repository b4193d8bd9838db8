package cloudipam

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
	"github.com/cnibox/cnibox/store"
)

// poolsField names the cached pools in the allocator's messages.
const poolsField = "cloud pools"

func add(ctx context.Context, a *cniplug.Args, c *config) (types.Result, error) {
	req, err := c.Request(a)
	if err != nil {
		return nil, err
	}
	var allocs []ipam.Allocation
	err = withPools(ctx, a, c, func(tx *store.IPAMTx, cache *CloudCache) (err error) {
		allocs, err = ipam.AllocatePools(tx, req, poolsField, pools(c, cache))
		return err
	})
	if err != nil {
		return nil, err
	}
	res := ipamrole.Result(ipamrole.Allocated(allocs), nil, c.DNS)
	res.Routes = c.Routes
	if res.Routes == nil {
		// As Azure's IPAM does: a default route via the subnet's gateway.
		for _, al := range allocs {
			dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if al.Addr.Addr().Is6() {
				dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			res.Routes = append(res.Routes, &types.Route{Dst: ipamrole.IPNet(dst), GW: ipamrole.IP(al.Gateway)})
		}
	}
	return res, nil
}
