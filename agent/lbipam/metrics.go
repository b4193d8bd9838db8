//go:build !nokube

package lbipam

import "github.com/prometheus/client_golang/prometheus"

// metrics are the controller's Prometheus metrics (Config.Register): the
// leader's view (an agent that does not lead reports no pool).
type metrics struct {
	used, free *prometheus.GaugeVec
	leader     prometheus.Gauge
	pending    prometheus.Gauge
	writes     *prometheus.CounterVec
}

func newMetrics() *metrics {
	const ns, sub = "cnibox_agent", "lb_ipam"
	return &metrics{
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "pool_addresses_used",
			Help: "Addresses of a LoadBalancerIPPool held by Services (an address shared by several counts once)."}, []string{"pool"}),
		free: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "pool_addresses_free",
			Help: "Addresses of a LoadBalancerIPPool held by no Service (a pool in conflict or disabled gives none of them)."}, []string{"pool"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "leader",
			Help: "1 while this agent holds the Lease cnibox-lb-ipam and allocates, else 0."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "services_short",
			Help: "Services of type LoadBalancer lacking an address they need (no pool, pool exhausted, address refused)."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "status_writes_total",
			Help: "Writes of a Service's status by the allocator, by result (ok, conflict, error)."}, []string{"result"}),
	}
}

// set records a plan's usage.
func (m *metrics) set(usage map[string]Usage, short int) {
	m.used.Reset()
	m.free.Reset()
	for name, u := range usage {
		m.used.WithLabelValues(name).Set(u.Used)
		m.free.WithLabelValues(name).Set(u.Size - u.Used)
	}
	m.pending.Set(float64(short))
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
	return []prometheus.Collector{m.used, m.free, m.leader, m.pending, m.writes}
}
