package netops

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// What this file adds is for pods routed through a host veth that holds no
// address, the layout of Azure CNI's transparent mode: routes with the
// "static" protocol an administrator's `ip route add` would leave, a
// neighbour entry in a state other than permanent, and the listings that
// show a route's protocol and scope and a neighbour's state, which Route
// and Neigh leave out.

// EnsureStaticRoute adds r, or replaces the route with the same
// destination, table and metric, with protocol static (`ip route replace
// ... proto static`) and scope link when r.ScopeLink, else global.
func (h *Handle) EnsureStaticRoute(r Route) error {
	err := h.routeOp(r, false, func(nr *netlink.Route) error {
		nr.Protocol = unix.RTPROT_STATIC
		return h.nlh.RouteReplace(nr)
	})
	if err != nil {
		return fmt.Errorf("replace route %s proto static in %s: %w", r, h.where(), classify(err))
	}
	return nil
}

// EnsureNeighProbe makes ip resolve to mac on dev with an entry in state
// PROBE (`ip neigh replace IP lladdr MAC dev DEV nud probe`): the kernel
// confirms it with unicast probes to mac and keeps it while they are
// answered, where a permanent entry is never checked.
func (h *Handle) EnsureNeighProbe(dev string, ip netip.Addr, mac net.HardwareAddr) error {
	return h.setNeigh(dev, ip, mac, netlink.NUD_PROBE)
}

// setNeigh replaces the entry of ip on dev with mac in state (a NUD_*).
func (h *Handle) setNeigh(dev string, ip netip.Addr, mac net.HardwareAddr, state int) error {
	if !ip.IsValid() || len(mac) == 0 {
		return fmt.Errorf("ensure neighbour on %q: need an address and a MAC (got %v, %q)", dev, ip, mac)
	}
	err := h.withLinkIndex(dev, func(idx int) error {
		return h.nlh.NeighSet(&netlink.Neigh{
			LinkIndex:    idx,
			Family:       family(ip),
			State:        state,
			Type:         unix.RTN_UNICAST,
			IP:           toIP(ip),
			HardwareAddr: mac,
		})
	})
	if err != nil {
		return fmt.Errorf("ensure neighbour %s lladdr %s nud %s on %q in %s: %w", ip, mac, strings.ToLower(neighState(state)), dev, h.where(), classify(err))
	}
	return nil
}

// RouteDetail is a route of RouteDetails: Route with its protocol and scope
// ("static", "kernel", "boot"; "link", "universe" (which `ip route`
// calls global), "host").
type RouteDetail struct {
	Route
	Protocol string
	Scope    string
}

// String formats d like `ip route`.
func (d RouteDetail) String() string {
	r := d.Route
	r.ScopeLink = false // said by Scope
	return r.String() + " proto " + d.Protocol + " scope " + d.Scope
}

// RouteDetails returns the main table's unicast routes out of dev (both
// families) with their protocol and scope.
func (h *Handle) RouteDetails(dev string) ([]RouteDetail, error) {
	list, err := h.routesOut(dev)
	if err != nil {
		return nil, err
	}
	var out []RouteDetail
	for _, nr := range list {
		if nr.Type != unix.RTN_UNICAST || nr.Table != unix.RT_TABLE_MAIN {
			continue
		}
		r := Route{GW: fromIP(nr.Gw), Dev: dev, Src: fromIP(nr.Src), Priority: nr.Priority,
			ScopeLink: nr.Scope == netlink.SCOPE_LINK, Onlink: nr.Flags&int(netlink.FLAG_ONLINK) != 0}
		r.Dst = routeDst(nr)
		out = append(out, RouteDetail{Route: r, Protocol: nr.Protocol.String(), Scope: nr.Scope.String()})
	}
	return out, nil
}

// NeighDetail is an entry of NeighDetails: Neigh with its state as `ip
// neigh` names it ("PERMANENT", "PROBE", "REACHABLE", "STALE", "DELAY",
// "INCOMPLETE", "FAILED", "NOARP").
type NeighDetail struct {
	Neigh
	State string
}

// NeighDetails returns dev's IPv4 and IPv6 neighbour entries with their
// states.
func (h *Handle) NeighDetails(dev string) ([]NeighDetail, error) {
	var out []NeighDetail
	err := h.withLinkIndex(dev, func(idx int) error {
		out = out[:0]
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			list, err := retryDump(func() ([]netlink.Neigh, error) { return h.nlh.NeighList(idx, fam) })
			if err != nil {
				return err
			}
			for _, n := range list {
				a := fromIP(n.IP)
				if !a.IsValid() || n.LinkIndex != idx {
					continue
				}
				e := NeighDetail{Neigh: Neigh{Dev: dev, IP: a, Permanent: n.State&netlink.NUD_PERMANENT != 0}, State: neighState(n.State)}
				if len(n.HardwareAddr) > 0 {
					e.MAC = append(net.HardwareAddr(nil), n.HardwareAddr...)
				}
				out = append(out, e)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list neighbours of %q in %s: %w", dev, h.where(), classify(err))
	}
	return out, nil
}

// neighState names a NUD state as `ip neigh` does.
func neighState(s int) string {
	for _, st := range []struct {
		bit  int
		name string
	}{
		{netlink.NUD_PERMANENT, "PERMANENT"}, {netlink.NUD_NOARP, "NOARP"}, {netlink.NUD_REACHABLE, "REACHABLE"},
		{netlink.NUD_STALE, "STALE"}, {netlink.NUD_DELAY, "DELAY"}, {netlink.NUD_PROBE, "PROBE"},
		{netlink.NUD_INCOMPLETE, "INCOMPLETE"}, {netlink.NUD_FAILED, "FAILED"},
	} {
		if s&st.bit != 0 {
			return st.name
		}
	}
	return "NONE"
}

// routesOut dumps the routes (both families, every table) whose output
// interface is dev.
func (h *Handle) routesOut(dev string) ([]netlink.Route, error) {
	var list []netlink.Route
	err := h.withLinkIndex(dev, func(idx int) error {
		var err error
		list, err = retryDump(func() ([]netlink.Route, error) {
			return h.nlh.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: idx}, netlink.RT_FILTER_OIF)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list routes of %q in %s: %w", dev, h.where(), classify(err))
	}
	return list, nil
}
