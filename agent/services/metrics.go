package services

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's metrics under kube-proxy's names where they
// mean the same (a dashboard or alert written for kube-proxy reads them
// unchanged): sync durations (full: Resync, partial: Apply), the last
// successful and last queued sync, the network programming latency
// (from an EndpointSlice's last-change-trigger-time to its change being
// written), changes seen, ports without a local endpoint, the answers of
// /healthz and /livez, failed syncs. A nil *Metrics records nothing.
type Metrics struct {
	syncDuration, fullDuration, partialDuration prometheus.Histogram
	lastSync, lastQueued                        prometheus.Gauge
	programming                                 prometheus.Histogram
	svcChanges, epChanges                       prometheus.Counter
	noLocal                                     *prometheus.GaugeVec
	healthz, livez                              *prometheus.CounterVec
	failures                                    prometheus.Counter
}

// NewMetrics makes the proxy's metrics.
func NewMetrics() *Metrics {
	const ns = "kubeproxy"
	buckets := prometheus.ExponentialBuckets(0.001, 2, 15)
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets})
	}
	return &Metrics{
		syncDuration:    hist("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds (cnibox: one Apply or Resync of the services table)"),
		fullDuration:    hist("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs"),
		partialDuration: hist("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs"),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "sync_proxy_rules_last_timestamp_seconds",
			Help: "The last time proxy rules were successfully synced"}),
		lastQueued: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "sync_proxy_rules_last_queued_timestamp_seconds",
			Help: "The last time a sync of proxy rules was queued"}),
		programming: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "network_programming_duration_seconds",
			Help:    "In Cluster Network Programming Latency in seconds",
			Buckets: programmingBuckets()}),
		svcChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sync_proxy_rules_service_changes_total",
			Help: "Cumulative proxy rules Service changes"}),
		epChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sync_proxy_rules_endpoint_changes_total",
			Help: "Cumulative proxy rules Endpoint changes"}),
		noLocal: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "sync_proxy_rules_no_local_endpoints_total",
			Help: "Number of services with a Local traffic policy and no endpoints"}, []string{"traffic_policy"}),
		healthz: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "proxy_healthz_total",
			Help: "Cumulative proxy healthz HTTP status"}, []string{"code"}),
		livez: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "proxy_livez_total",
			Help: "Cumulative proxy livez HTTP status"}, []string{"code"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sync_proxy_rules_nftables_sync_failures_total",
			Help: "Total number of failed syncs of the services table"}),
	}
}

// Collectors are the metrics, for a registry.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.syncDuration, m.fullDuration, m.partialDuration, m.lastSync, m.lastQueued, m.programming,
		m.svcChanges, m.epChanges, m.noLocal, m.healthz, m.livez, m.failures}
}

// Register registers the metrics with reg (the agent's Metrics.Register).
func (m *Metrics) Register(reg func(prometheus.Collector) error) error {
	for _, c := range m.Collectors() {
		if err := reg(c); err != nil {
			return err
		}
	}
	return nil
}

// queued records a change queued.
func (m *Metrics) queued(t time.Time) {
	if m != nil {
		m.lastQueued.Set(float64(t.UnixNano()) / 1e9)
	}
}

// synced records a sync that began at start, full or not.
func (m *Metrics) synced(start time.Time, full, ok bool, ch changes, noLocalInternal, noLocalExternal int) {
	if m == nil {
		return
	}
	m.svcChanges.Add(float64(ch.services))
	m.epChanges.Add(float64(ch.endpoints))
	if !ok {
		m.failures.Inc()
		return
	}
	d := time.Since(start).Seconds()
	m.syncDuration.Observe(d)
	if full {
		m.fullDuration.Observe(d)
	} else {
		m.partialDuration.Observe(d)
	}
	now := time.Now()
	m.lastSync.Set(float64(now.UnixNano()) / 1e9)
	for _, t := range ch.triggers {
		m.programming.Observe(now.Sub(t).Seconds())
	}
	m.noLocal.WithLabelValues("internal").Set(float64(noLocalInternal))
	m.noLocal.WithLabelValues("external").Set(float64(noLocalExternal))
}

// answered counts an answer of /healthz or /livez.
func (m *Metrics) answered(path string, code int) {
	if m == nil {
		return
	}
	c := m.healthz
	if path == "/livez" {
		c = m.livez
	}
	c.WithLabelValues(strconv.Itoa(code)).Inc()
}

// programmingBuckets are kube-proxy's network programming buckets (0.25 s
// to 5 min) with finer ones below them: this proxy aims at milliseconds.
func programmingBuckets() []float64 {
	out := prometheus.ExponentialBuckets(0.001, 2, 8) // 1 ms .. 128 ms
	out = append(out, 0.25, 0.5)
	out = append(out, prometheus.LinearBuckets(1, 1, 59)...)
	out = append(out, prometheus.LinearBuckets(60, 5, 12)...)
	return append(out, prometheus.LinearBuckets(120, 30, 7)...)
}
