package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Route is a unicast route.
type Route struct {
	Dst       netip.Prefix // the zero Prefix means the default route of GW's family
	GW        netip.Addr   // optional
	Dev       string       // output interface; optional when GW is set
	Src       netip.Addr   // preferred source address; optional
	MTU       int          // route MTU; 0 = none
	Onlink    bool         // the gateway is on the link even if no prefix covers it
	ScopeLink bool         // scope link (e.g. a route to a directly connected subnet)
	Table     int          // 0 = main
	Priority  int          // metric; 0 = kernel default
}

// String formats r like `ip route`.
func (r Route) String() string {
	s := "default"
	if r.Dst.IsValid() {
		s = r.Dst.String()
	}
	if r.GW.IsValid() {
		s += " via " + r.GW.String()
	}
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	if r.Src.IsValid() {
		s += " src " + r.Src.String()
	}
	if r.Table != 0 {
		s += fmt.Sprintf(" table %d", r.Table)
	}
	if r.Priority != 0 {
		s += fmt.Sprintf(" metric %d", r.Priority)
	}
	if r.ScopeLink {
		s += " scope link"
	}
	if r.Onlink {
		s += " onlink"
	}
	if r.MTU != 0 {
		s += fmt.Sprintf(" mtu %d", r.MTU)
	}
	return s
}

// EnsureRoute adds r or replaces the route with the same destination, table
// and metric (`ip route replace`).
func (h *Handle) EnsureRoute(r Route) error {
	err := h.routeOp(r, false, func(nr *netlink.Route) error { return h.nlh.RouteReplace(nr) })
	if err != nil {
		return fmt.Errorf("replace route %s in %s: %w", r, h.where(), classify(err))
	}
	return nil
}

// DeleteRoute deletes r. It returns nil when there is no such route (or no
// such interface).
func (h *Handle) DeleteRoute(r Route) error {
	err := h.routeOp(r, true, func(nr *netlink.Route) error { return h.nlh.RouteDel(nr) })
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete route %s in %s: %w", r, h.where(), classify(err))
	}
	return nil
}

// routeOp converts r for netlink and runs fn with it.
func (h *Handle) routeOp(r Route, del bool, fn func(*netlink.Route) error) error {
	nr, err := toNetlinkRoute(r)
	if err != nil {
		return err
	}
	if del && !r.ScopeLink {
		// Match any scope, like `ip route del`.
		nr.Scope = netlink.SCOPE_NOWHERE
	}
	if r.Dev == "" {
		return fn(nr)
	}
	return h.withLinkIndex(r.Dev, func(idx int) error {
		nr.LinkIndex = idx
		return fn(nr)
	})
}

func toNetlinkRoute(r Route) (*netlink.Route, error) {
	nr := &netlink.Route{
		Gw:       toIP(r.GW),
		Src:      toIP(r.Src),
		MTU:      r.MTU,
		Table:    r.Table,
		Priority: r.Priority,
	}
	dst := r.Dst
	if !dst.IsValid() {
		switch {
		case r.GW.Unmap().Is4():
			dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		case r.GW.Is6():
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		default:
			return nil, fmt.Errorf("route needs a destination or a gateway")
		}
	}
	dst = netip.PrefixFrom(dst.Addr().Unmap(), dst.Bits()).Masked()
	ipnet, err := toIPNet(dst)
	if err != nil {
		return nil, err
	}
	nr.Dst = ipnet
	if r.GW.IsValid() && r.GW.Unmap().Is4() != dst.Addr().Is4() {
		return nil, fmt.Errorf("gateway %s and destination %s are of different families", r.GW, dst)
	}
	if r.Onlink {
		nr.Flags = int(netlink.FLAG_ONLINK)
	}
	if r.ScopeLink {
		nr.Scope = netlink.SCOPE_LINK
	}
	return nr, nil
}

// Routes returns the IPv4 and IPv6 routes of the main table whose output
// interface is dev ("" = all). Multipath routes are reported without their
// next hops.
func (h *Handle) Routes(dev string) ([]Route, error) {
	var (
		list []netlink.Route
		err  error
	)
	names := map[int]string{}
	if dev == "" {
		list, err = retryDump(func() ([]netlink.Route, error) { return h.nlh.RouteList(nil, netlink.FAMILY_ALL) })
		if err == nil {
			var links []Link
			if links, err = h.Links(); err == nil {
				for _, l := range links {
					names[l.Index] = l.Name
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("list routes of %q in %s: %w", dev, h.where(), classify(err))
		}
	} else {
		if list, err = h.routesOut(dev); err != nil {
			return nil, err
		}
		for _, nr := range list {
			names[nr.LinkIndex] = dev
		}
	}
	out := make([]Route, 0, len(list))
	for _, nr := range list {
		if nr.Type != unix.RTN_UNICAST {
			continue
		}
		r := Route{
			GW:        fromIP(nr.Gw),
			Dev:       names[nr.LinkIndex],
			Src:       fromIP(nr.Src),
			MTU:       nr.MTU,
			Onlink:    nr.Flags&int(netlink.FLAG_ONLINK) != 0,
			ScopeLink: nr.Scope == netlink.SCOPE_LINK,
			Table:     nr.Table,
			Priority:  nr.Priority,
		}
		if nr.Table == unix.RT_TABLE_MAIN {
			r.Table = 0
		}
		r.Dst = routeDst(nr)
		out = append(out, r)
	}
	return out, nil
}

// routeDst is nr's destination: the default route of its family when it has
// none.
func routeDst(nr netlink.Route) netip.Prefix {
	if p, ok := fromIPNet(nr.Dst); ok {
		return p
	}
	if nr.Family == netlink.FAMILY_V6 {
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
}
