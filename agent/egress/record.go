//go:build !nokube

package egress

import (
	"os"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/store"
)

// record writes the node's view into the store for `cnibox inspect
// egress`.
func (c *controller) record() {
	st := store.EgressState{Node: c.Node, Uplink: c.Uplink, Takeovers: c.Takeovers, AgentPID: os.Getpid()}
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
		st.Gateways[i].IPs = append(st.Gateways[i].IPs, store.EgressIP{IP: u.IP, Holder: c.Holders[u.IP],
			Eligible: eligible, Rank: rank, LocalPods: u.LocalPods, Pods: len(u.Pods)})
	}
	slices.SortFunc(st.Gateways, func(a, b store.EgressGateway) int { return strings.Compare(a.Name, b.Name) })
	c.Record(c.cfg.DataDir, "egress", func(s *store.Store) error { return s.PutEgress(st) })
}
