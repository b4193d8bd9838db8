//go:build !nokube

package lbannounce

import (
	"os"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/agent/addrhold"
	"github.com/cnibox/cnibox/agent/lbipam"
	"github.com/cnibox/cnibox/store"
)

// newMetrics are the controller's Prometheus metrics (Config.Register).
func newMetrics() *addrhold.Metrics {
	return addrhold.NewMetrics(addrhold.MetricNames{Subsystem: "lb", Held: "addresses_announced",
		HeldHelp:      "LoadBalancer addresses this node announces.",
		TakeoversHelp: "LoadBalancer addresses this node took over from another announcer whose Lease expired.",
		TakeoverHelp:  "From the last renewal this node saw of the previous announcer to its own take of the Lease being accepted.",
		FailsHelp:     "Writes of a LoadBalancer address's Lease that failed (other than a conflict with another node's write)."})
}

// record writes the node's view into the store for `cnibox inspect lb`:
// the pools (size, addresses held), every address with its Services and
// its announcer.
func (c *controller) record() {
	held := 0
	for _, h := range c.holders {
		if h == c.node {
			held++
		}
	}
	c.m.Held.Set(float64(held))
	st := store.LBState{Node: c.node, Uplink: c.uplink, Takeovers: c.takeovers, AgentPID: os.Getpid(),
		Pools: []store.LBPool{}, Addresses: []store.LBAddress{}}
	used := map[string]int{}
	for _, a := range c.plan.Addresses {
		rank := slices.Index(a.Candidates, c.node)
		st.Addresses = append(st.Addresses, store.LBAddress{IP: a.IP, Pool: a.Pool, Services: a.Services, Local: a.Local,
			Holder: c.holders[a.IP], Eligible: rank >= 0, Rank: max(rank, 0), Candidates: len(a.Candidates), Why: a.Why})
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
	s, err := store.Open(store.Dir(c.cfg.DataDir))
	if err != nil {
		c.cfg.Log.Warn(what+": cannot record the node's view for cnibox inspect lb", "err", err)
		return
	}
	defer s.Close()
	if err := s.PutLB(st); err != nil {
		c.cfg.Log.Warn(what+": cannot record the node's view for cnibox inspect lb", "err", err)
		return
	}
	c.written = true
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
