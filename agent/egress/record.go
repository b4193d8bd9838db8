//go:build !nokube

package egress

import (
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cnibox/cnibox/store"
)

// metrics are the controller's Prometheus metrics (Config.Register).
type metrics struct {
	held      prometheus.Gauge
	takeovers prometheus.Counter
	takeover  prometheus.Histogram
	failures  prometheus.Counter
}

func newMetrics() *metrics {
	const ns, sub = "cnibox_agent", "egress"
	return &metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "addresses_held",
			Help: "Egress addresses this node holds."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "takeovers_total",
			Help: "Egress addresses this node took over from another holder whose Lease expired."}),
		takeover: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "takeover_seconds",
			Help:    "From the last renewal this node saw of the previous holder to its own take of the Lease being accepted.",
			Buckets: []float64{0.5, 1, 1.5, 2, 2.25, 2.5, 3, 4, 6, 10}}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "lease_write_failures_total",
			Help: "Writes of an egress Lease that failed (other than a conflict with another node's write)."}),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

func (m *metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.held, m.takeovers, m.takeover, m.failures}
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
	c.m.held.Set(float64(held))
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
