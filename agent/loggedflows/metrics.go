package loggedflows

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Counts counts the verdicts the table logged, by verdict and deciding
// policy, for the agent's /metrics (before the flow log's rate limit: the
// counts are whole when the file is not). Its labels are policy names,
// never addresses: as many series as policies. Safe for concurrent use.
type Counts struct {
	mu   sync.Mutex
	n    map[Key]uint64
	lost uint64
}

// Key is one series: the verdict ("allow", "deny") and the policy's kind,
// namespace and name (kind "NetworkPolicy" and name "" for a drop by a
// namespace's isolation).
type Key struct{ Verdict, Kind, Namespace, Name string }

// Add counts one verdict.
func (c *Counts) Add(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[Key]uint64{}
	}
	c.n[k]++
}

// SetLost records the total of verdicts lost before they were read.
func (c *Counts) SetLost(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = n
}

var (
	descConns = prometheus.NewDesc("cnibox_agent_flow_log_connections_total",
		"Policy verdicts the flow log logged (before its rate limit), by verdict and deciding policy.",
		[]string{"verdict", "kind", "namespace", "policy"}, nil)
	descLost = prometheus.NewDesc("cnibox_agent_flow_log_lost_total",
		"Logged verdicts lost before the agent read them (the kernel's buffer or the reader's queue full).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Counts) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConns
	ch <- descLost
}

// Collect implements prometheus.Collector.
func (c *Counts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.CounterValue, float64(n), k.Verdict, k.Kind, k.Namespace, k.Name)
	}
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(c.lost))
}
