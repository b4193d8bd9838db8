package attach

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// PodAddrs reads IPAM's addresses for the pod's interface, the one at
// index idx of res: each address with its prefix length, and the first
// gateway IPAM gives of each family (by Is4) for PodRoutes. It appends them
// to res's IPs, on interface idx, with IPAM's gateways.
func PodAddrs(ipamRes, res *current.Result, idx int) (addrs []netip.Prefix, gws map[bool]netip.Addr) {
	gws = map[bool]netip.Addr{}
	for _, ipc := range ipamRes.IPs {
		addrs = append(addrs, PrefixOf(ipc.Address))
		if gw := AddrOf(ipc.Gateway); gw.IsValid() {
			if _, seen := gws[gw.Is4()]; !seen {
				gws[gw.Is4()] = gw
			}
		}
		res.IPs = append(res.IPs, &current.IPConfig{Interface: &idx, Address: ipc.Address, Gateway: ipc.Gateway})
	}
	return addrs, gws
}

// PodRoutes converts IPAM's routes to routes out of the pod's interface
// ifname; a route without a gateway goes via gws[its family is IPv4], as
// the reference plugins route it.
func PodRoutes(ifname string, routes []*types.Route, gws map[bool]netip.Addr) []netops.Route {
	out := make([]netops.Route, 0, len(routes))
	for _, r := range routes {
		dst := PrefixOf(r.Dst)
		gw := AddrOf(r.GW)
		if !gw.IsValid() {
			gw = gws[dst.Addr().Is4()]
		}
		table := 0
		if r.Table != nil {
			table = *r.Table
		}
		out = append(out, netops.Route{Dst: dst, GW: gw, Dev: ifname, MTU: r.MTU, Priority: r.Priority, Table: table})
	}
	return out
}

// PickDNS returns the config's own dns section when it has one, else
// IPAM's.
func PickDNS(conf, ipam types.DNS) types.DNS {
	if conf.Nameservers != nil || conf.Search != nil || conf.Options != nil || conf.Domain != "" {
		return conf
	}
	return ipam
}

// EnsurePodAddrs puts addrs on the pod's interface ifname, with o.
func EnsurePodAddrs(pod *netops.Handle, ifname string, addrs []netip.Prefix, o netops.AddrOpts) error {
	for _, pfx := range addrs {
		if err := pod.EnsureAddr(ifname, pfx, o); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "add address %s to %s in the pod: %w", pfx, ifname, err)
		}
	}
	return nil
}

// EnsurePodRoutes adds routes in the pod, in their order (a route through
// a gateway after the one that reaches the gateway).
func EnsurePodRoutes(pod *netops.Handle, routes []netops.Route) error {
	for _, rt := range routes {
		if err := pod.EnsureRoute(rt); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "add route %s in the pod: %w", rt, err)
		}
	}
	return nil
}
