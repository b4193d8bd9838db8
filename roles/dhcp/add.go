package dhcp

import (
	"context"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// add asks the daemon for a lease on the pod's interface and returns it.
func add(ctx context.Context, a *cniplug.Args, cfg *config) (types.Result, error) {
	resp, err := call(ctx, cfg, request(proto.OpAdd, a, cfg), callTimeout, types.ErrTryAgainLater)
	if err != nil {
		return nil, err
	}
	if resp.Lease == nil {
		return nil, cniplug.Errorf(types.ErrInternal, "dhcp: the daemon answered ADD without a lease")
	}
	return result(resp.Lease, cfg.Priority)
}

// result converts a lease to the CNI result.
func result(l *proto.Lease, priority int) (types.Result, error) {
	p, err := netip.ParsePrefix(l.Address)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrInternal, "dhcp: the daemon's lease has address %q: %v", l.Address, err)
	}
	addr := ipamrole.Address{Addr: p}
	addr.Gateway, _ = netip.ParseAddr(l.Gateway)
	var routes []ipamrole.Route
	for _, r := range l.Routes {
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			continue
		}
		rt := ipamrole.Route{Dst: dst, Priority: priority}
		rt.GW, _ = netip.ParseAddr(r.GW)
		routes = append(routes, rt)
	}
	dns := types.DNS{Nameservers: l.DNS.Nameservers, Domain: strings.TrimSuffix(l.DNS.Domain, "."), Search: l.DNS.Search}
	return ipamrole.Result([]ipamrole.Address{addr}, routes, dns), nil
}
