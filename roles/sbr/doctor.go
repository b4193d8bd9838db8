package sbr

import (
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/cniplug"
)

// doctor finds sbr's rules for the endpoint's addresses in the pod (from
// <address> lookup <table>) and declares their tables: the routes of the
// interface, its default route among them, live there on purpose, not in
// the main table.
func doctor(c *cniplug.EndpointCheck) {
	if c.Pod == nil || len(c.Endpoint.IPs) == 0 {
		return
	}
	rules, err := c.Pod.Rules()
	if err != nil {
		c.Warn("sbr", "", "cannot read the pod's routing rules: %v", err)
		return
	}
	for _, p := range c.Endpoint.IPs {
		src := netip.PrefixFrom(p.Addr(), p.Addr().BitLen())
		for _, r := range rules {
			if r.Src != src || r.Table == unix.RT_TABLE_MAIN || r.Table == unix.RT_TABLE_LOCAL || r.Table == unix.RT_TABLE_DEFAULT || r.Table == 0 {
				continue
			}
			if !slices.Contains(c.Tables, r.Table) {
				c.Tables = append(c.Tables, r.Table)
			}
			c.Pass("sbr", "from %s lookup %d: %s's routes are in table %d on purpose (source-based routing)", src.Addr(), r.Table, c.Endpoint.IfName, r.Table)
		}
	}
}
