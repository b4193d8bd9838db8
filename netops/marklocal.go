package netops

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nft"
)

// MarkLocal is policy routing that delivers every packet carrying a mark
// to the node itself, whatever its destination, as TPROXY setups route:
//
//	ip rule add fwmark MARK/MARK lookup TABLE priority PRIORITY
//	ip route add local 0.0.0.0/0 dev lo table TABLE
//	ip -6 rule add fwmark MARK/MARK lookup TABLE priority PRIORITY
//	ip -6 route add local ::/0 dev lo table TABLE
//
// netops/nft's DNS table marks the pods' DNS (after kube-proxy's DNAT,
// its destination the endpoint) and sends it to the DNS proxy's port; this
// routing takes it to the node's sockets instead of to the endpoint. The
// match is on the mark's bits only (MARK/MARK): other bits of the packet's
// mark (kube-proxy's, the firewall's) do not matter.
type MarkLocal struct {
	Mark     uint32 // the mark's bits (not 0)
	Table    int    // the routing table holding the local default routes
	Priority int    // the rules' priority (not 0: before the main table's 32766)
}

// DNSMarkLocal is the DNS proxy's routing, the defaults:
//
//   - Mark nft.DNSMark (0x04000000), the bit the DNS table sets: beside
//     the firewall's 0x01000000 and 0x02000000, clear of kube-proxy's
//     0x4000 and 0x8000, Tailscale's 0xff0000, Istio's 0x539 and Cilium's
//     0xf00.
//   - Table 53053: far from the tables of 1 to 255 other programs pick
//     (Tailscale 52, kube-router 77 to 79, Istio 133, Cilium 2004 and
//     2005, wg-quick 51820) and from sbr's, counted up from 100 per pod.
//   - Priority 100: before sbr's per-pod rules (which the kernel puts just
//     before the main table, 32765 and down) and any rule routing a pod's
//     traffic by its source, so that a marked query is delivered here,
//     never routed by its pod's table; only marked packets match it.
var DNSMarkLocal = MarkLocal{Mark: nft.DNSMark, Table: 53053, Priority: 100}

// String formats r like `ip rule`.
func (r MarkLocal) String() string {
	return fmt.Sprintf("%d: fwmark %#x/%#x lookup %d (local default routes)", r.Priority, r.Mark, r.Mark, r.Table)
}

func (r MarkLocal) check() error {
	if r.Mark == 0 || r.Table <= 0 || r.Table == unix.RT_TABLE_MAIN || r.Table == unix.RT_TABLE_LOCAL || r.Table == unix.RT_TABLE_DEFAULT || r.Priority <= 0 {
		return fmt.Errorf("mark routing %s: needs a mark, a table of its own (not main, local or default) and a priority above 0", r)
	}
	return nil
}

// markLocalFamily is a family a MarkLocal routes, with its default
// prefix.
type markLocalFamily struct {
	family int
	dst    *net.IPNet
}

// markLocalFamilies returns IPv4's and IPv6's (a function: a package's
// values are plain data, TestNoInitCode).
func markLocalFamilies() []markLocalFamily {
	return []markLocalFamily{
		{netlink.FAMILY_V4, &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}},
		{netlink.FAMILY_V6, &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
	}
}

// noFamily reports whether err says the kernel has no such address family
// (IPv6 disabled): that family is skipped.
func noFamily(err error) bool { return errors.Is(err, unix.EAFNOSUPPORT) }

// isMarkRule reports whether nr is r's rule, at any priority.
func (r MarkLocal) isMarkRule(nr netlink.Rule) bool {
	return nr.Mark == r.Mark && nr.Mask != nil && *nr.Mask == r.Mark && nr.Table == r.Table &&
		nr.Src == nil && nr.Dst == nil && nr.IifName == "" && nr.OifName == "" && !nr.Invert
}

func (r MarkLocal) rule(family int) *netlink.Rule {
	nr := netlink.NewRule()
	mask := r.Mark
	nr.Family, nr.Mark, nr.Mask, nr.Table, nr.Priority = family, r.Mark, &mask, r.Table, r.Priority
	return nr
}

func (r MarkLocal) route(family int, dst *net.IPNet, lo int) *netlink.Route {
	return &netlink.Route{
		Family: family, Dst: dst, LinkIndex: lo, Table: r.Table,
		Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST,
	}
}

// EnsureMarkLocal puts r's rules and routes in place, IPv4 and IPv6 (IPv6
// skipped when the kernel has none): a rule already there at r.Priority
// stays, one for the same mark and table at another priority goes, the
// routes are replaced.
func (h *Handle) EnsureMarkLocal(r MarkLocal) error {
	if err := r.check(); err != nil {
		return err
	}
	return h.withLinkIndex("lo", func(lo int) error {
		for _, f := range markLocalFamilies() {
			rules, err := retryDump(func() ([]netlink.Rule, error) { return h.nlh.RuleList(f.family) })
			if noFamily(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("ensure %s: list rules in %s: %w", r, h.where(), classify(err))
			}
			have := false
			for _, nr := range rules {
				switch {
				case !r.isMarkRule(nr):
				case nr.Priority == r.Priority && !have:
					have = true
				default: // another priority, or a second copy
					stale := r.rule(f.family)
					stale.Priority = nr.Priority
					if err := h.nlh.RuleDel(stale); err != nil && !isNotFound(err) {
						return fmt.Errorf("ensure %s: delete the rule at priority %d in %s: %w", r, nr.Priority, h.where(), classify(err))
					}
				}
			}
			if err := h.nlh.RouteReplace(r.route(f.family, f.dst, lo)); err != nil {
				return fmt.Errorf("ensure %s: route local %s dev lo table %d in %s: %w", r, f.dst, r.Table, h.where(), classify(err))
			}
			if have {
				continue
			}
			if err := h.nlh.RuleAdd(r.rule(f.family)); err != nil {
				return fmt.Errorf("ensure %s: add the rule in %s: %w", r, h.where(), classify(err))
			}
		}
		return nil
	})
}

// DeleteMarkLocal removes r's rules (at any priority) and its local
// default routes, IPv4 and IPv6; what is not there is no error.
func (h *Handle) DeleteMarkLocal(r MarkLocal) error {
	if err := r.check(); err != nil {
		return err
	}
	for _, f := range markLocalFamilies() {
		for {
			nr := r.rule(f.family)
			nr.Priority = -1 // any
			err := h.nlh.RuleDel(nr)
			if isNotFound(err) || noFamily(err) {
				break
			}
			if err != nil {
				return fmt.Errorf("delete %s in %s: %w", r, h.where(), classify(err))
			}
		}
		routes, err := h.markLocalRoutes(r, f.family)
		if err != nil {
			return fmt.Errorf("delete %s: %w", r, err)
		}
		for i := range routes {
			if err := h.nlh.RouteDel(&routes[i]); err != nil && !isNotFound(err) {
				return fmt.Errorf("delete %s: route local %s dev lo table %d in %s: %w", r, f.dst, r.Table, h.where(), classify(err))
			}
		}
	}
	return nil
}

// markLocalRoutes returns the local default routes of r's table in family.
func (h *Handle) markLocalRoutes(r MarkLocal, family int) ([]netlink.Route, error) {
	list, err := retryDump(func() ([]netlink.Route, error) {
		return h.nlh.RouteListFiltered(family, &netlink.Route{Table: r.Table}, netlink.RT_FILTER_TABLE)
	})
	if noFamily(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list routes of table %d in %s: %w", r.Table, h.where(), classify(err))
	}
	var out []netlink.Route
	for _, nr := range list {
		if nr.Type != unix.RTN_LOCAL {
			continue
		}
		if p, ok := fromIPNet(nr.Dst); ok && p.Bits() != 0 {
			continue
		}
		out = append(out, nr)
	}
	return out, nil
}

// MarkLocalState counts what of r is in place, both families together:
// the rules for r's mark and table at r.Priority, the rules for them at
// other priorities, and the local default routes in r's table. In place
// with IPv4 and IPv6 is 2, 0, 2.
func (h *Handle) MarkLocalState(r MarkLocal) (rules, otherRules, routes int, err error) {
	for _, f := range markLocalFamilies() {
		list, err := retryDump(func() ([]netlink.Rule, error) { return h.nlh.RuleList(f.family) })
		if noFamily(err) {
			continue
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("list rules in %s: %w", h.where(), classify(err))
		}
		for _, nr := range list {
			switch {
			case !r.isMarkRule(nr):
			case nr.Priority == r.Priority:
				rules++
			default:
				otherRules++
			}
		}
		rs, err := h.markLocalRoutes(r, f.family)
		if err != nil {
			return 0, 0, 0, err
		}
		routes += len(rs)
	}
	return rules, otherRules, routes, nil
}
