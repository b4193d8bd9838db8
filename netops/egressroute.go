package netops

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EgressRoute is the routing of one egress IP that another node holds
// (issue 52): this node's pods that leave from it are routed to the
// holder, which SNATs them (netops/nft's egress table keeps their pod
// address on the way here). In its own table:
//
//	ip route replace throw 10.244.0.0/16 table 53100                            # per Throw
//	ip route replace default via 10.244.2.0 dev flannel.1 onlink table 53100    # or per Destination
//	ip rule add from 10.244.1.5/32 lookup 53100 priority 101                     # per Source
//
// The rules match the pods' source address, not a packet mark, for two
// reasons. A reply comes back over the overlay to the pod, and a strict
// rp_filter (fib_validate_source) checks it with a reverse lookup whose
// source is the pod's address: that lookup hits the same `from` rule and
// finds the overlay device the reply came in by, so the reply passes;
// with a mark rule the reply (unmarked, unless a connmark restored it)
// would get the main table's answer, the uplink, and be dropped. And a
// vxlan device routes its encapsulated packet (vxlan_get_route) with the
// inner packet's skb->mark: a rule on that mark would match the outer
// packet too and send it back into the overlay, a loop, where the outer
// packet's source (the node's address) matches no pod's `from` rule.
type EgressRoute struct {
	// Table is the route's own table, in [EgressTableFirst,
	// EgressTableLast], one per egress IP.
	Table int
	// Via is the holder: its overlay (VTEP) address with OnLink on the
	// overlay device (vxlan), or its node address (host-gw).
	Via netip.Addr
	// Dev is the interface toward Via (required).
	Dev    string
	OnLink bool
	// Throw are the cluster networks: looked up in the next rules (the
	// main table) instead.
	Throw []netip.Prefix
	// Destinations restrict the redirection; empty: a default route. A
	// destination that is also in Throw is thrown.
	Destinations []netip.Prefix
	// Sources are this node's pods that leave from the egress IP: one
	// rule each, `from SRC/32 (IPv6: /128) lookup Table priority EgressRulePriority`.
	// A source is in one EgressRoute at most.
	Sources []netip.Addr
}

// ErrEgressFamily is wrapped by SyncEgressRoutes' error about a source or
// destination that is not of its EgressRoute's Via's family.
var ErrEgressFamily = errors.New("not of the egress route's address family")

// addrFamily is a's netlink family.
func addrFamily(a netip.Addr) int {
	if a.Unmap().Is6() {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// EgressRulePriority is the priority of the egress rules: after the DNS
// proxy's mark rule (DNSMarkLocal, 100), which must deliver a pod's
// diverted query here first, and before sbr's per-pod rules and the main
// table.
const EgressRulePriority = 101

// EgressTableFirst and EgressTableLast bound the egress routes' tables
// (256 of them): beside the DNS proxy's 53053, far from what other
// programs pick (see DNSMarkLocal).
const (
	EgressTableFirst = 53100
	EgressTableLast  = 53355
)

// egressTable reports whether table is one of the egress routes'.
func egressTable(table int) bool { return table >= EgressTableFirst && table <= EgressTableLast }

// egressRouteWant is a route SyncEgressRoutes wants.
type egressRouteWant struct {
	table  int
	dst    netip.Prefix
	throw  bool
	gw     netip.Addr
	oif    int
	onlink bool
}

// matches reports whether the kernel's route nr is w.
func (w egressRouteWant) matches(nr netlink.Route) bool {
	if nr.Table != w.table || routeDst(nr) != w.dst {
		return false
	}
	if w.throw {
		return nr.Type == unix.RTN_THROW
	}
	return nr.Type == unix.RTN_UNICAST && fromIP(nr.Gw) == w.gw && nr.LinkIndex == w.oif &&
		nr.Flags&int(netlink.FLAG_ONLINK) != 0 == w.onlink && len(nr.MultiPath) == 0
}

// route is w for netlink.
func (w egressRouteWant) route() *netlink.Route {
	dst, _ := toIPNet(w.dst)
	nr := &netlink.Route{Family: addrFamily(w.dst.Addr()), Table: w.table, Dst: dst}
	if w.throw {
		nr.Type = unix.RTN_THROW
		return nr
	}
	nr.Type, nr.Gw, nr.LinkIndex = unix.RTN_UNICAST, toIP(w.gw), w.oif
	if w.onlink {
		nr.Flags = int(netlink.FLAG_ONLINK)
	}
	return nr
}

func (w egressRouteWant) String() string {
	if w.throw {
		return fmt.Sprintf("throw %s table %d", w.dst, w.table)
	}
	return Route{Dst: w.dst, GW: w.gw, Table: w.table, Onlink: w.onlink}.String()
}

// egressRuleWant is a rule SyncEgressRoutes wants.
type egressRuleWant struct {
	src   netip.Addr
	table int
}

// matches reports whether the kernel's rule nr is w (and nothing more).
func (w egressRuleWant) matches(nr netlink.Rule) bool {
	src, ok := fromIPNet(nr.Src)
	return ok && src == netip.PrefixFrom(w.src, w.src.BitLen()) && nr.Table == w.table && nr.Priority == EgressRulePriority &&
		nr.Dst == nil && nr.Mark == 0 && nr.Mask == nil && nr.IifName == "" && nr.OifName == "" && !nr.Invert &&
		nr.Tos == 0 && nr.IPProto == 0 && nr.Sport == nil && nr.Dport == nil && nr.UIDRange == nil
}

func (w egressRuleWant) rule() *netlink.Rule {
	nr := netlink.NewRule()
	nr.Src, _ = toIPNet(netip.PrefixFrom(w.src, w.src.BitLen()))
	nr.Family, nr.Table, nr.Priority = addrFamily(w.src), w.table, EgressRulePriority
	return nr
}

// egressWants checks want and returns the routes and rules it asks for,
// with the interfaces' indexes.
func (h *Handle) egressWants(want []EgressRoute) ([]egressRouteWant, []egressRuleWant, error) {
	var (
		routes []egressRouteWant
		rules  []egressRuleWant
		tables = map[int]bool{}
		srcs   = map[netip.Addr]int{}
	)
	for _, er := range want {
		what := fmt.Sprintf("egress routes of table %d", er.Table)
		if !egressTable(er.Table) {
			return nil, nil, fmt.Errorf("%s: the table is not in [%d, %d]", what, EgressTableFirst, EgressTableLast)
		}
		if tables[er.Table] {
			return nil, nil, fmt.Errorf("%s: the table is in two egress routes", what)
		}
		tables[er.Table] = true
		via := er.Via.Unmap()
		if !via.IsValid() {
			return nil, nil, fmt.Errorf("%s: via: not an address", what)
		}
		same := func(kind string, a netip.Addr) error {
			if a.Unmap().Is6() != via.Is6() {
				return fmt.Errorf("%s: %s %v (via %s): %w", what, kind, a, via, ErrEgressFamily)
			}
			return nil
		}
		idx, _, err := h.linkIndex(er.Dev)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: dev: %w", what, err)
		}
		thrown := map[netip.Prefix]bool{}
		for _, p := range er.Throw {
			if !p.IsValid() {
				return nil, nil, fmt.Errorf("%s: throw %v: not a prefix", what, p)
			}
			if p.Addr().Unmap().Is6() != via.Is6() {
				continue // the other family's cluster network
			}
			if p = p.Masked(); !thrown[p] {
				thrown[p] = true
				routes = append(routes, egressRouteWant{table: er.Table, dst: p, throw: true})
			}
		}
		dsts := er.Destinations
		if len(dsts) == 0 {
			dsts = []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
			if via.Is6() {
				dsts = []netip.Prefix{netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
			}
		}
		for _, p := range dsts {
			if !p.IsValid() {
				return nil, nil, fmt.Errorf("%s: destination %v: not a prefix", what, p)
			}
			if err := same("destination", p.Addr()); err != nil {
				return nil, nil, err
			}
			if p = p.Masked(); !thrown[p] {
				thrown[p] = true // and each destination once
				routes = append(routes, egressRouteWant{table: er.Table, dst: p, gw: via, oif: idx, onlink: er.OnLink})
			}
		}
		for _, a := range er.Sources {
			src := a.Unmap()
			if err := same("source", src); err != nil {
				return nil, nil, err
			}
			if t, ok := srcs[src]; ok && t != er.Table {
				return nil, nil, fmt.Errorf("%s: source %s is routed by table %d too: one egress gateway per pod", what, src, t)
			} else if ok {
				continue
			}
			srcs[src] = er.Table
			rules = append(rules, egressRuleWant{src: src, table: er.Table})
		}
	}
	return routes, rules, nil
}

// SyncEgressRoutes makes the rules (IPv4 and IPv6) at EgressRulePriority that look up
// a table in [EgressTableFirst, EgressTableLast], and the routes of those
// tables, exactly want: what is missing is added, what is not wanted is
// removed, and nothing else is touched; a second call with the same want
// changes nothing. Routes are added before the rules that lead to them and
// rules removed before their routes, so that a selected pod's traffic
// never meets an empty table (it would fall through to the main table and
// leave from this node). Each EgressRoute is of its Via's family: its
// Sources and Destinations are too (or the error wraps ErrEgressFamily),
// and only its Throw networks of that family are thrown.
func (h *Handle) SyncEgressRoutes(want []EgressRoute) error {
	routes, rules, err := h.egressWants(want)
	if err != nil {
		return fmt.Errorf("sync egress routes in %s: %w", h.where(), err)
	}
	haveRoutes, err := h.egressKernelRoutes()
	if err != nil {
		return err
	}
	for _, w := range routes {
		if slices.ContainsFunc(haveRoutes, w.matches) {
			continue
		}
		if err := h.nlh.RouteReplace(w.route()); err != nil {
			return fmt.Errorf("sync egress routes: route %s in %s: %w", w, h.where(), classify(err))
		}
	}
	haveRules, err := h.egressKernelRules()
	if err != nil {
		return err
	}
	for _, w := range rules {
		if slices.ContainsFunc(haveRules, w.matches) {
			continue
		}
		if err := h.nlh.RuleAdd(w.rule()); err != nil {
			return fmt.Errorf("sync egress routes: rule from %s lookup %d in %s: %w", w.src, w.table, h.where(), classify(err))
		}
	}
	for _, nr := range haveRules {
		if slices.ContainsFunc(rules, func(w egressRuleWant) bool { return w.matches(nr) }) {
			continue
		}
		if src, ok := fromIPNet(nr.Src); ok {
			nr.Family = addrFamily(src.Addr())
		}
		if err := h.nlh.RuleDel(&nr); err != nil && !isNotFound(err) {
			return fmt.Errorf("sync egress routes: delete rule %s in %s: %w", nr, h.where(), classify(err))
		}
	}
	for _, nr := range haveRoutes {
		if slices.ContainsFunc(routes, func(w egressRouteWant) bool { return w.matches(nr) }) {
			continue
		}
		// A route replaced above is not there as it was: ESRCH.
		if err := h.nlh.RouteDel(&nr); err != nil && !isNotFound(err) {
			return fmt.Errorf("sync egress routes: delete route %s in %s: %w", nr, h.where(), classify(err))
		}
	}
	return nil
}

// egressKernelRoutes returns the routes (IPv4 and IPv6) of the egress
// tables.
func (h *Handle) egressKernelRoutes() ([]netlink.Route, error) {
	var all []netlink.Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := retryDump(func() ([]netlink.Route, error) {
			return h.nlh.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			return nil, fmt.Errorf("list routes in %s: %w", h.where(), classify(err))
		}
		for _, nr := range rs {
			nr.Family = fam
			all = append(all, nr)
		}
	}
	return slices.DeleteFunc(all, func(nr netlink.Route) bool { return !egressTable(nr.Table) }), nil
}

// egressKernelRules returns the rules (IPv4 and IPv6) at
// EgressRulePriority that look up an egress table.
func (h *Handle) egressKernelRules() ([]netlink.Rule, error) {
	var all []netlink.Rule
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := retryDump(func() ([]netlink.Rule, error) { return h.nlh.RuleList(fam) })
		if err != nil {
			return nil, fmt.Errorf("list rules in %s: %w", h.where(), classify(err))
		}
		for _, nr := range rs {
			nr.Family = fam
			all = append(all, nr)
		}
	}
	return slices.DeleteFunc(all, func(nr netlink.Rule) bool {
		return nr.Priority != EgressRulePriority || !egressTable(nr.Table)
	}), nil
}

// EgressRoutes reads back what SyncEgressRoutes keeps: one EgressRoute
// per egress table that has routes or rules, by table, with its throw
// routes, its route via the holder (Destinations empty for a default
// route) and its rules' sources, each list sorted, for `cnibox inspect
// egress` and checks. A table whose unicast routes disagree on the holder
// reports the first one's.
func (h *Handle) EgressRoutes() ([]EgressRoute, error) {
	routes, err := h.egressKernelRoutes()
	if err != nil {
		return nil, err
	}
	rules, err := h.egressKernelRules()
	if err != nil {
		return nil, err
	}
	byTable := map[int]*EgressRoute{}
	get := func(table int) *EgressRoute {
		if byTable[table] == nil {
			byTable[table] = &EgressRoute{Table: table}
		}
		return byTable[table]
	}
	for _, nr := range routes {
		er, dst := get(nr.Table), routeDst(nr)
		switch nr.Type {
		case unix.RTN_THROW:
			er.Throw = append(er.Throw, dst)
		case unix.RTN_UNICAST:
			if !er.Via.IsValid() {
				er.Via, er.OnLink = fromIP(nr.Gw), nr.Flags&int(netlink.FLAG_ONLINK) != 0
				if l, err := h.nlh.LinkByIndex(nr.LinkIndex); err == nil {
					er.Dev = l.Attrs().Name
				}
			}
			if dst.Bits() != 0 {
				er.Destinations = append(er.Destinations, dst)
			}
		}
	}
	for _, nr := range rules {
		if src, ok := fromIPNet(nr.Src); ok && src.IsSingleIP() {
			er := get(nr.Table)
			er.Sources = append(er.Sources, src.Addr())
		}
	}
	out := make([]EgressRoute, 0, len(byTable))
	for _, er := range byTable {
		slices.SortFunc(er.Throw, netip.Prefix.Compare)
		slices.SortFunc(er.Destinations, netip.Prefix.Compare)
		slices.SortFunc(er.Sources, netip.Addr.Compare)
		out = append(out, *er)
	}
	slices.SortFunc(out, func(a, b EgressRoute) int { return a.Table - b.Table })
	return out, nil
}
