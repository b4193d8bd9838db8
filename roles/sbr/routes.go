package sbr

import (
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// sbrRoutes is ADD without a configured table, as the reference does it:
// each address gets the first free table (from 100 on; the one its rule
// already looks up on a repeated ADD) with a default route through its
// gateway and copies of the interface's main-table routes that belong to it
// (its source or gateway in the address's subnet, or neither set), and a
// rule from the address to the table. Then the interface's routes leave the
// main table (with addSourceHints only those that are not subnet routes,
// and each subnet gets a route with the address as preferred source).
func sbrRoutes(pod *netops.Handle, ifname string, c *sbrConf, addrs []sbrAddr, undo *cniplug.Undo) error {
	routes, err := pod.Routes(ifname)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "sbr: routes of %q in the pod: %w", ifname, err)
	}
	next := sbrFirstTable
	for _, ad := range addrs {
		table, err := sbrRuleTable(pod, ad.single, 0)
		if err != nil {
			return err
		}
		if table == 0 {
			if table, err = pod.FreeTable(next); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "sbr: %w", err)
			}
			undo.Push(func() { _ = pod.FlushTableRoutes(ifname, table) })
		}
		next = table + 1
		if err := sbrRule(pod, netops.Rule{Src: ad.single, Table: table}, undo); err != nil {
			return err
		}
		gw := ad.gw
		if ad.ip.Addr().Is4() && c.gw4.IsValid() {
			gw = c.gw4
		} else if ad.ip.Addr().Is6() && c.gw6.IsValid() {
			gw = c.gw6
		}
		if gw.IsValid() {
			if err := pod.EnsureRoute(netops.Route{GW: gw, Dev: ifname, Table: table}); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "sbr: default route of table %d: %w", table, err)
			}
		}
		for _, r := range routes {
			if !(ad.ip.Contains(r.Src) || ad.ip.Contains(r.GW) || (!r.Src.IsValid() && !r.GW.IsValid())) {
				continue
			}
			r.Table, r.Onlink = table, false
			if err := pod.EnsureRoute(r); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "sbr: copy route to table %d: %w", table, err)
			}
		}
	}
	if c.sourceHints {
		for _, ad := range addrs {
			r := netops.Route{Dst: ad.ip.Masked(), Src: ad.ip.Addr(), Dev: ifname, ScopeLink: true}
			_ = pod.EnsureRoute(r) // as the reference: a warning, not a failure
		}
	}
	for _, r := range routes {
		if c.sourceHints && r.ScopeLink {
			continue
		}
		if err := pod.DeleteRoute(r); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "sbr: move route %s out of the main table: %w", r, err)
		}
		undo.Push(func() { _ = pod.EnsureRoute(r) })
	}
	return nil
}
