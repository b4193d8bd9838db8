package attach

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/netops"
)

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
