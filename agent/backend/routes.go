package backend

import (
	"net/netip"

	"github.com/cnibox/cnibox/netops"
)

// InNetworks reports whether r is a route to a part of one of the cluster
// networks (more specific than the network itself) in the main table: the
// routes a backend owns on a device it shares (the underlay interface).
func InNetworks(r netops.Route, networks ...netip.Prefix) bool {
	if r.Table != 0 {
		return false
	}
	for _, n := range networks {
		if n.IsValid() && r.Dst.Addr().Is4() == n.Addr().Is4() && n.Contains(r.Dst.Addr()) && r.Dst.Bits() > n.Bits() {
			return true
		}
	}
	return false
}

// SameRoute reports whether r (as the kernel lists it) is w.
func SameRoute(r, w netops.Route) bool {
	return r.Dst == w.Dst && r.GW == w.GW && r.Dev == w.Dev && r.Onlink == w.Onlink
}

// SyncRoutes makes the routes of the devices devs that owned selects match
// want (by destination) exactly: an owned route that want does not hold is
// deleted, a wanted one that is missing or differs is replaced.
func SyncRoutes(h *netops.Handle, devs []string, owned func(netops.Route) bool, want map[netip.Prefix]netops.Route) (removed, added int, err error) {
	have := map[netip.Prefix]bool{}
	for _, dev := range devs {
		routes, err := h.Routes(dev)
		if err != nil {
			return removed, added, err
		}
		for _, r := range routes {
			if !owned(r) {
				continue
			}
			if w, ok := want[r.Dst]; ok && SameRoute(r, w) && !have[r.Dst] {
				have[r.Dst] = true
				continue
			}
			if err := h.DeleteRoute(r); err != nil {
				return removed, added, err
			}
			removed++
		}
	}
	for dst, w := range want {
		if have[dst] {
			continue
		}
		if err := h.EnsureRoute(w); err != nil {
			return removed, added, err
		}
		added++
	}
	return removed, added, nil
}
