//go:build !nokube

package egress

import (
	"os"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/agent/addrhold"
	"github.com/cnibox/cnibox/store"
)

// newMetrics are the controller's Prometheus metrics (Config.Register).
func newMetrics() *addrhold.Metrics {
	return addrhold.NewMetrics(addrhold.MetricNames{Subsystem: "egress", Held: "addresses_held",
		HeldHelp:      "Egress addresses this node holds.",
		TakeoversHelp: "Egress addresses this node took over from another holder whose Lease expired.",
		TakeoverHelp:  "From the last renewal this node saw of the previous holder to its own take of the Lease being accepted.",
		FailsHelp:     "Writes of an egress Lease that failed (other than a conflict with another node's write)."})
}

// record writes the node's view into the store for `cnibox inspect
// egress`.
func (c *controller) record() {
	held := 0
	for _, h := range c.holders {
		if h == c.node {
			held++
		}
	}
	c.m.Held.Set(float64(held))
	st := store.EgressState{Node: c.node, Uplink: c.uplink, Takeovers: c.takeovers, AgentPID: os.Getpid()}
	byName := map[string]int{}
	for _, u := range c.plan.Uses {
		i, ok := byName[u.Gateway]
		if !ok {
			cond := c.plan.Conditions[u.Gateway]
			st.Gateways = append(st.Gateways, store.EgressGateway{Name: u.Gateway, Ready: cond.Ready, Reason: cond.Reason, Message: cond.Message})
			i = len(st.Gateways) - 1
			byName[u.Gateway] = i
		}
		rank, eligible := c.plan.Eligible[u.IP]
		st.Gateways[i].IPs = append(st.Gateways[i].IPs, store.EgressIP{IP: u.IP, Holder: c.holders[u.IP],
			Eligible: eligible, Rank: rank, LocalPods: u.LocalPods, Pods: len(u.Pods)})
	}
	slices.SortFunc(st.Gateways, func(a, b store.EgressGateway) int { return strings.Compare(a.Name, b.Name) })
	s, err := store.Open(store.Dir(c.cfg.DataDir))
	if err != nil {
		c.cfg.Log.Warn("egress gateways: cannot record the node's view for cnibox inspect egress", "err", err)
		return
	}
	defer s.Close()
	if err := s.PutEgress(st); err != nil {
		c.cfg.Log.Warn("egress gateways: cannot record the node's view for cnibox inspect egress", "err", err)
	}
}
