package netops

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Rule is a policy routing rule `from Src lookup Table`.
type Rule struct {
	Src      netip.Prefix // a single address (/32 or /128) for sbr
	Table    int
	Priority int // 0 = the kernel picks one below the last rule
}

// String formats r like `ip rule`.
func (r Rule) String() string {
	s := fmt.Sprintf("from %s lookup %d", r.Src, r.Table)
	if r.Priority != 0 {
		s = fmt.Sprintf("%d: %s", r.Priority, s)
	}
	return s
}

// Rules returns the IPv4 and IPv6 rules that have a source prefix.
func (h *Handle) Rules() ([]Rule, error) {
	list, err := retryDump(func() ([]netlink.Rule, error) { return h.nlh.RuleList(netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list rules in %s: %w", h.where(), classify(err))
	}
	var out []Rule
	for _, nr := range list {
		p, ok := fromIPNet(nr.Src)
		if !ok {
			continue
		}
		out = append(out, Rule{Src: p, Table: nr.Table, Priority: nr.Priority})
	}
	return out, nil
}

// EnsureRule adds r unless a rule from r.Src to r.Table is there already.
func (h *Handle) EnsureRule(r Rule) error {
	have, err := h.Rules()
	if err != nil {
		return err
	}
	for _, o := range have {
		if o.Src == r.Src && o.Table == r.Table {
			return nil
		}
	}
	nr, err := toNetlinkRule(r)
	if err != nil {
		return err
	}
	if err := h.nlh.RuleAdd(nr); err != nil {
		return fmt.Errorf("add rule %s in %s: %w", r, h.where(), classify(err))
	}
	return nil
}

// DeleteRule deletes the rules from r.Src to r.Table (any priority); it
// returns nil when there is none.
func (h *Handle) DeleteRule(r Rule) error {
	for {
		nr, err := toNetlinkRule(r)
		if err != nil {
			return err
		}
		nr.Priority = -1
		if err := h.nlh.RuleDel(nr); err != nil {
			if isNotFound(err) {
				return nil
			}
			return fmt.Errorf("delete rule %s in %s: %w", r, h.where(), classify(err))
		}
	}
}

func toNetlinkRule(r Rule) (*netlink.Rule, error) {
	src, err := toIPNet(r.Src)
	if err != nil {
		return nil, err
	}
	nr := netlink.NewRule()
	nr.Src, nr.Table = src, r.Table
	nr.Family = netlink.FAMILY_V4
	if r.Src.Addr().Is6() && !r.Src.Addr().Is4In6() {
		nr.Family = netlink.FAMILY_V6
	}
	if r.Priority != 0 {
		nr.Priority = r.Priority
	}
	return nr, nil
}

// FreeTable returns the first routing table id from first on that no rule
// looks up and no route is in (the reference sbr's choice).
func (h *Handle) FreeTable(first int) (int, error) {
	rules, err := retryDump(func() ([]netlink.Rule, error) { return h.nlh.RuleList(netlink.FAMILY_ALL) })
	if err != nil {
		return 0, fmt.Errorf("list rules in %s: %w", h.where(), classify(err))
	}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return h.nlh.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return 0, fmt.Errorf("list routes in %s: %w", h.where(), classify(err))
	}
	used := map[int]bool{}
	for _, r := range rules {
		used[r.Table] = true
	}
	for _, r := range routes {
		used[r.Table] = true
	}
	t := first
	for used[t] {
		t++
	}
	return t, nil
}

// CopyRoutesToTable copies the main table's routes of dev for which keep
// reports true into table (replacing what is there), with their flags
// cleared as the kernel refuses some of them on a new route.
func (h *Handle) CopyRoutesToTable(dev string, table int, keep func(Route) bool) error {
	routes, err := h.Routes(dev)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if !keep(r) {
			continue
		}
		r.Table, r.Onlink = table, false
		if err := h.EnsureRoute(r); err != nil {
			return err
		}
	}
	return nil
}

// tableRoutes returns the routes of dev in table.
func (h *Handle) tableRoutes(dev string, table int) ([]netlink.Route, error) {
	var list []netlink.Route
	err := h.withLinkIndex(dev, func(idx int) error {
		var err error
		list, err = retryDump(func() ([]netlink.Route, error) {
			return h.nlh.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: idx, Table: table},
				netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list routes of %q in table %d in %s: %w", dev, table, h.where(), classify(err))
	}
	return list, nil
}

// FlushTableRoutes deletes the routes of dev in table. A missing dev is
// not an error (its routes went with it).
func (h *Handle) FlushTableRoutes(dev string, table int) error {
	list, err := h.tableRoutes(dev, table)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := range list {
		if err := h.nlh.RouteDel(&list[i]); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete route %s in %s: %w", list[i], h.where(), classify(err))
		}
	}
	return nil
}

// TableRoutes returns the unicast routes of dev in table (Dst, GW, Src,
// scope and metric; Dev is dev).
func (h *Handle) TableRoutes(dev string, table int) ([]Route, error) {
	list, err := h.tableRoutes(dev, table)
	if err != nil {
		return nil, err
	}
	var out []Route
	for _, nr := range list {
		if nr.Type != unix.RTN_UNICAST {
			continue
		}
		r := Route{GW: fromIP(nr.Gw), Src: fromIP(nr.Src), Dev: dev, Table: nr.Table, Priority: nr.Priority,
			ScopeLink: nr.Scope == netlink.SCOPE_LINK}
		r.Dst = routeDst(nr)
		out = append(out, r)
	}
	return out, nil
}
