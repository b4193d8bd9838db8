//go:build !nokube

package addrhold

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of one feature's election (the
// egress gateways', the LoadBalancer announcements'): the addresses this
// node holds, its takeovers and how long each took, and the failed
// writes of the Leases. A Metrics is a prometheus.Collector.
type Metrics struct {
	Held      prometheus.Gauge
	takeovers prometheus.Counter
	takeover  prometheus.Histogram
	Failures  prometheus.Counter
}

// MetricNames are a feature's subsystem, its held gauge's name, and the
// metrics' help texts.
type MetricNames struct {
	Subsystem, Held                                  string
	HeldHelp, TakeoversHelp, TakeoverHelp, FailsHelp string
}

// NewMetrics makes the metrics cnibox_agent_SUBSYSTEM_{HELD,
// takeovers_total, takeover_seconds, lease_write_failures_total}.
func NewMetrics(n MetricNames) *Metrics {
	const ns = "cnibox_agent"
	return &Metrics{
		Held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: n.Subsystem, Name: n.Held, Help: n.HeldHelp}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: n.Subsystem, Name: "takeovers_total",
			Help: n.TakeoversHelp}),
		takeover: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: n.Subsystem, Name: "takeover_seconds",
			Help: n.TakeoverHelp, Buckets: []float64{0.5, 1, 1.5, 2, 2.25, 2.5, 3, 4, 6, 10}}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: n.Subsystem, Name: "lease_write_failures_total",
			Help: n.FailsHelp}),
	}
}

// Took counts a takeover whose previous holder was last seen renewing at
// lastSeen.
func (m *Metrics) Took(lastSeen time.Time) {
	m.takeovers.Inc()
	m.takeover.Observe(time.Since(lastSeen).Seconds())
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.Held, m.takeovers, m.takeover, m.Failures}
}
