package agent

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
)

// Sync kinds, the "kind" label of the kernel sync metrics.
const (
	syncFull    = "full"    // every peer compared with the kernel
	syncUpdates = "updates" // the peers of one batch of lease updates
)

// Metrics are the agent's Prometheus metrics, in a registry of their own.
// A nil *Metrics ignores every event.
type Metrics struct {
	reg              *prometheus.Registry
	leaseHeld        prometheus.Gauge
	leaseExpiry      prometheus.Gauge
	renewals         prometheus.Counter
	renewFailures    prometheus.Counter
	peers            prometheus.Gauge
	unreachablePeers prometheus.Gauge
	syncSeconds      *prometheus.HistogramVec
	syncErrors       *prometheus.CounterVec
	watchRestarts    prometheus.Counter
	watchSnapshots   int
}

// NewMetrics makes the agent's metrics with the process and Go collectors.
func NewMetrics() *Metrics {
	const ns = "cnibox_agent"
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		leaseHeld: gauge("lease_held",
			"1 while the agent holds this node's subnet lease, else 0."),
		leaseExpiry: gauge("lease_expiry_timestamp_seconds",
			"When the held lease expires, as a Unix time (0: no expiry or no lease)."),
		renewals: counter("lease_renewals_total",
			"Lease renewals that succeeded."),
		renewFailures: counter("lease_renewal_failures_total",
			"Lease renewals that failed (the lease gone or the backend unreachable)."),
		peers: gauge("peers",
			"Other nodes programmed in the kernel (neighbour, FDB entry, route)."),
		unreachablePeers: gauge("peers_unreachable",
			"Other nodes' subnets the backend cannot program (host-gw: the peer is not on this node's L2 network); each is logged as an error."),
		syncSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "kernel_sync_duration_seconds",
			Help:    "How long a kernel sync took; kind=full is a full resync, kind=updates applies a batch of peer updates.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9)}, []string{"kind"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "kernel_sync_errors_total",
			Help: "Kernel syncs that failed, by kind (full, updates)."}, []string{"kind"}),
		watchRestarts: counter("lease_watch_restarts_total",
			"Times the lease backend started its watch over with a fresh snapshot (etcd: a broken or compacted watch)."),
	}
	for _, kind := range []string{syncFull, syncUpdates} {
		m.syncSeconds.WithLabelValues(kind)
		m.syncErrors.WithLabelValues(kind)
	}
	m.reg.MustRegister(m.leaseHeld, m.leaseExpiry, m.renewals, m.renewFailures, m.peers, m.unreachablePeers,
		m.syncSeconds, m.syncErrors, m.watchRestarts,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return m
}

// Register adds c (another part of the agent's, such as the policy
// table's) to the metrics; a nil *Metrics ignores it.
func (m *Metrics) Register(c prometheus.Collector) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(c)
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// lease records the lease held (a zero Lease: none).
func (m *Metrics) lease(l lease.Lease, held bool) {
	if m == nil {
		return
	}
	m.leaseHeld.Set(b2f(held))
	var exp float64
	if held && !l.Expiration.IsZero() {
		exp = float64(l.Expiration.Unix())
	}
	m.leaseExpiry.Set(exp)
}

// renewed counts a renewal and whether it succeeded.
func (m *Metrics) renewed(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.renewals.Inc()
	} else {
		m.renewFailures.Inc()
	}
}

// synced records a kernel sync of kind that started at start.
func (m *Metrics) synced(kind string, start time.Time, ok bool, peers int) {
	if m == nil {
		return
	}
	m.syncSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	if !ok {
		m.syncErrors.WithLabelValues(kind).Inc()
	}
	m.peers.Set(float64(peers))
}

// unreachable records how many peers the backend cannot program.
func (m *Metrics) unreachable(be backend.Backend) {
	if m == nil {
		return
	}
	n := 0
	if u, ok := be.(backend.Unreachable); ok {
		n = u.Unreachable()
	}
	m.unreachablePeers.Set(float64(n))
}

// snapshot counts the backend's snapshots: each one after the first is a
// restarted watch. It is called from the watch goroutine only.
func (m *Metrics) snapshot() {
	if m == nil {
		return
	}
	m.watchSnapshots++
	if m.watchSnapshots > 1 {
		m.watchRestarts.Inc()
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
