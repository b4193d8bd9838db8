//go:build !nokube

package lbannounce

import (
	"os"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/agent/lbipam"
	"github.com/cnibox/cnibox/store"
)

// record writes the node's view into the store for `cnibox inspect lb`:
// the pools (size, addresses held), every address with its Services and
// its announcer.
func (c *controller) record() {
	st := store.LBState{Node: c.Node, Uplink: c.Uplink, Takeovers: c.Takeovers, AgentPID: os.Getpid(),
		Pools: []store.LBPool{}, Addresses: []store.LBAddress{}}
	used := map[string]int{}
	for _, a := range c.plan.Addresses {
		rank := slices.Index(a.Candidates, c.Node)
		st.Addresses = append(st.Addresses, store.LBAddress{IP: a.IP, Pool: a.Pool, Services: a.Services, Local: a.Local,
			Holder: c.Holders[a.IP], Eligible: rank >= 0, Rank: max(rank, 0), Candidates: len(a.Candidates), Why: a.Why})
		if a.Pool != "" {
			used[a.Pool]++
		}
	}
	for _, o := range c.pools.List() {
		if p, ok := o.(*lbipam.LoadBalancerIPPool); ok {
			a := lbipam.ReadAnnounced(p)
			st.Pools = append(st.Pools, store.LBPool{Name: a.Name, Disabled: a.Disabled, Conflict: conflict(p, a), Total: a.Size(), Used: used[a.Name]})
		}
	}
	slices.SortFunc(st.Pools, func(a, b store.LBPool) int { return strings.Compare(a.Name, b.Name) })
	if c.Record(c.cfg.DataDir, "lb", func(s *store.Store) error { return s.PutLB(st) }) {
		c.written = true
	}
}

// conflict is why the allocator does not use pool p (its status condition
// lbipam.PoolConflict, else what the announcer cannot read of it).
func conflict(p *lbipam.LoadBalancerIPPool, a lbipam.Announced) string {
	for _, cond := range p.Status.Conditions {
		if cond.Type == lbipam.PoolConflict && cond.Status == "True" {
			return cond.Message
		}
	}
	return a.Invalid
}
