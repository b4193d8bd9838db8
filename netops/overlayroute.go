package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The overlay agent's routes that are not a peer's: the route lookup that
// --iface-can-reach asks for, and the blackhole route of this node's
// subnet (flannel's --ip-blackhole-route), which drops traffic to pod
// addresses of this node that no pod holds instead of sending it back out
// by the default route.

// RouteGet asks the kernel which interface, and which preferred source
// address, a packet to dst leaves by (`ip route get dst`). The source is
// the zero Addr when the route gives none.
func (h *Handle) RouteGet(dst netip.Addr) (dev string, src netip.Addr, err error) {
	routes, err := h.nlh.RouteGet(toIP(dst.Unmap()))
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("route get %s in %s: %w", dst, h.where(), classify(err))
	}
	for _, r := range routes {
		if r.LinkIndex <= 0 {
			continue
		}
		l, err := h.nlh.LinkByIndex(r.LinkIndex)
		if err != nil {
			return "", netip.Addr{}, fmt.Errorf("route get %s in %s: interface %d: %w", dst, h.where(), r.LinkIndex, classify(err))
		}
		return l.Attrs().Name, fromIP(r.Src), nil
	}
	return "", netip.Addr{}, fmt.Errorf("route get %s in %s: no route with an interface: %w", dst, h.where(), ErrNotFound)
}

// BlackholeMetric is the metric of the blackhole routes: a bridge's
// connected route to the same subnet (metric 0 over IPv4, 256 over IPv6)
// wins while it is there, and the blackhole takes over when it is not (the
// bridge gone, or a CNI without one, as Canal). flanneld adds its blackhole
// with the default metric, which over IPv4 the kernel refuses (EEXIST)
// while the bridge's route exists.
const BlackholeMetric = 4096

// blackholeRoute is the netlink route of a blackhole to p in the main table.
func blackholeRoute(p netip.Prefix) (*netlink.Route, error) {
	ipnet, err := toIPNet(p.Masked())
	if err != nil {
		return nil, err
	}
	fam := netlink.FAMILY_V4
	if p.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	return &netlink.Route{Dst: ipnet, Type: unix.RTN_BLACKHOLE, Family: fam, Priority: BlackholeMetric}, nil
}

// HasBlackholeRoute reports whether the main table has a blackhole route
// to p.
func (h *Handle) HasBlackholeRoute(p netip.Prefix) (bool, error) {
	r, err := blackholeRoute(p)
	if err != nil {
		return false, err
	}
	list, err := retryDump(func() ([]netlink.Route, error) {
		return h.nlh.RouteListFiltered(r.Family, &netlink.Route{Dst: r.Dst, Type: r.Type}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TYPE)
	})
	if err != nil {
		return false, fmt.Errorf("list blackhole routes to %s in %s: %w", p, h.where(), classify(err))
	}
	for _, nr := range list {
		if nr.Type == unix.RTN_BLACKHOLE && (nr.Table == 0 || nr.Table == unix.RT_TABLE_MAIN) {
			return true, nil
		}
	}
	return false, nil
}

// EnsureBlackholeRoute adds `blackhole p` to the main table unless it is
// there; added reports that it was missing. A more specific route (a pod's,
// a peer's) still wins over it.
func (h *Handle) EnsureBlackholeRoute(p netip.Prefix) (added bool, err error) {
	ok, err := h.HasBlackholeRoute(p)
	if err != nil || ok {
		return false, err
	}
	r, err := blackholeRoute(p)
	if err != nil {
		return false, err
	}
	if err := h.nlh.RouteAdd(r); err != nil {
		return false, fmt.Errorf("add route blackhole %s in %s: %w", p, h.where(), classify(err))
	}
	return true, nil
}

// DeleteBlackholeRoute removes the blackhole route to p; a missing one is
// fine.
func (h *Handle) DeleteBlackholeRoute(p netip.Prefix) error {
	r, err := blackholeRoute(p)
	if err != nil {
		return err
	}
	if err := h.nlh.RouteDel(r); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete route blackhole %s in %s: %w", p, h.where(), classify(err))
	}
	return nil
}
