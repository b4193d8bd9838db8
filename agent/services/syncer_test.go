package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// call is one call of the recording table.
type call struct {
	full bool
	snap *svcmodel.Snapshot
}

// recTable records each call on calls; while gate is set, a call waits
// for it to be closed; fail holds the errors of the next calls.
type recTable struct {
	calls chan call
	mu    sync.Mutex
	gate  chan struct{}
	fail  []error
	n     atomic.Int32
}

func newRecTable() *recTable { return &recTable{calls: make(chan call, 100)} }

func (r *recTable) do(full bool, s *svcmodel.Snapshot) error {
	r.n.Add(1)
	r.mu.Lock()
	gate := r.gate
	var err error
	if len(r.fail) > 0 {
		err, r.fail = r.fail[0], r.fail[1:]
	}
	r.mu.Unlock()
	r.calls <- call{full, s}
	if gate != nil {
		<-gate
	}
	return err
}

func (r *recTable) Apply(s *svcmodel.Snapshot) error  { return r.do(false, s) }
func (r *recTable) Resync(s *svcmodel.Snapshot) error { return r.do(true, s) }
func (r *recTable) Delete() error                     { return nil }

// next is the next call, within a minute.
func (r *recTable) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-r.calls:
		return c
	case <-time.After(time.Minute):
		t.Fatal("no call of the table within a minute")
		return call{}
	}
}

// until returns the first call that ok accepts.
func (r *recTable) until(t *testing.T, ok func(call) bool) call {
	t.Helper()
	for {
		if c := r.next(t); ok(c) {
			return c
		}
	}
}

// service is the slim Service ns/name with a cluster IP of n and a slice
// of one ready endpoint.
func service(n int, name string) (*cluster.Service, *cluster.EndpointSlice) {
	s := svc(func(s *corev1.Service) {
		s.Name = name
		s.Spec.ClusterIP = fmt.Sprintf("10.96.%d.%d", n/250, n%250+1)
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
	})
	es := slice(name+"-1", ep{addr: fmt.Sprintf("10.1.%d.%d", n/250, n%250+1)})
	es.Labels[discoveryv1.LabelServiceName] = name
	return cluster.ServiceFromAPI(s), cluster.EndpointSliceFromAPI(es)
}

// has reports whether snap serves the Service ns/name.
func has(snap *svcmodel.Snapshot, name string) bool {
	for _, p := range snap.Flat() {
		if p.Name.Name == name {
			return true
		}
	}
	return false
}

// startSyncer runs a syncer of tab (cfg's other fields as given) until the
// test ends.
func startSyncer(t *testing.T, tab Table, cfg Config) (*State, *Syncer) {
	t.Helper()
	var s *Syncer
	st := NewState(func() { s.Trigger() })
	cfg.Table, cfg.State = tab, st
	s = NewSyncer(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return st, s
}

// TestSyncerCoalesces: the first sync is a full one; the changes that come
// while a sync runs are one Apply after it, holding them all; an update
// that changes nothing the proxy reads calls the table not at all.
func TestSyncerCoalesces(t *testing.T) {
	tab := newRecTable()
	st, _ := startSyncer(t, tab, Config{Resync: time.Hour})
	if c := tab.next(t); !c.full || c.snap.Len() != 0 {
		t.Fatalf("first call %+v, want a Resync of nothing", c)
	}
	gate := make(chan struct{})
	tab.mu.Lock()
	tab.gate = gate
	tab.mu.Unlock()
	s0, e0 := service(0, "s0")
	st.SetSlice(e0) // (a slice alone serves nothing: no call)
	st.SetService(s0)
	if c := tab.next(t); c.full || !has(c.snap, "s0") { // it waits at the gate
		t.Fatalf("call %+v, want s0's Apply", c)
	}
	for i := 1; i <= 50; i++ {
		s, e := service(i, fmt.Sprintf("s%d", i))
		st.SetSlice(e)
		st.SetService(s)
	}
	tab.mu.Lock()
	tab.gate = nil
	tab.mu.Unlock()
	close(gate)
	c := tab.next(t)
	if c.full || c.snap.Len() != 51 {
		t.Errorf("the burst's sync: full %v, %d ports; want an Apply of 51", c.full, c.snap.Len())
	}
	again := *s0
	again.ResourceVersion = "2"
	st.SetService(&again)
	st.SetService(func() *cluster.Service { s, _ := service(99, "sentinel"); return s }())
	if c := tab.next(t); !has(c.snap, "sentinel") {
		t.Errorf("after a change of nothing the proxy reads, a call without the sentinel: %+v", c)
	}
	if n := tab.n.Load(); n != 4 {
		t.Errorf("%d calls of the table, want 4: the first Resync, s0, the burst of 100 events, the sentinel", n)
	}
}

// TestSyncerResyncs: every Resync period the whole snapshot is resynced.
func TestSyncerResyncs(t *testing.T) {
	tab := newRecTable()
	st, _ := startSyncer(t, tab, Config{Resync: 10 * time.Millisecond})
	s0, e0 := service(0, "s0")
	st.SetService(s0)
	st.SetSlice(e0)
	c := tab.until(t, func(c call) bool { return c.full && has(c.snap, "s0") })
	if len(c.snap.Flat()[0].ClusterEndpoints) != 1 {
		t.Errorf("resync's snapshot %+v, want s0 with its endpoint", c.snap.Flat())
	}
}

// TestSyncerBacksOff: a failed Apply is followed by a full Resync of the
// same state, after a wait; the failure is counted.
func TestSyncerBacksOff(t *testing.T) {
	tab := newRecTable()
	m := NewMetrics()
	st, _ := startSyncer(t, tab, Config{Resync: time.Hour, MinBackoff: time.Millisecond, Metrics: m})
	tab.next(t) // the first Resync
	tab.mu.Lock()
	tab.fail = []error{errors.New("netlink: busy"), errors.New("netlink: busy")}
	tab.mu.Unlock()
	s0, _ := service(0, "s0")
	st.SetService(s0)
	if c := tab.next(t); c.full || !has(c.snap, "s0") {
		t.Fatalf("call %+v, want s0's Apply", c)
	}
	for i := 0; i < 2; i++ { // the failed Apply's Resync fails too: another
		if c := tab.next(t); !c.full || !has(c.snap, "s0") {
			t.Fatalf("after a failure: %+v, want a Resync with s0", c)
		}
	}
	if got := counter(t, m.failures); got != 2 {
		t.Errorf("failures counted %v, want 2", got)
	}
	s1, _ := service(1, "s1")
	st.SetService(s1)
	if c := tab.until(t, func(c call) bool { return has(c.snap, "s1") }); c.full {
		t.Error("after a successful Resync, a change is a Resync again, want an Apply")
	}
}

// TestSyncerSnapshot: the snapshot carries the NodePort addresses and the
// cluster CIDRs; the health checks follow it.
func TestSyncerSnapshot(t *testing.T) {
	tab := newRecTable()
	npa := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	startSyncer(t, tab, Config{Resync: time.Hour, ClusterCIDRs: cidrs,
		NodePortAddrs: func() ([]netip.Addr, bool, error) { return npa, false, nil }})
	c := tab.next(t)
	if fmt.Sprint(c.snap.NodePortAddrs) != fmt.Sprint(npa) || fmt.Sprint(c.snap.ClusterCIDRs) != fmt.Sprint(cidrs) {
		t.Errorf("snapshot's NodePort addresses %v and cluster CIDRs %v, want %v and %v", c.snap.NodePortAddrs, c.snap.ClusterCIDRs, npa, cidrs)
	}
}

// fakeClock is a clock a test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func get(h func(http.ResponseWriter)) (int, string, http.Header) {
	w := httptest.NewRecorder()
	h(w)
	return w.Code, w.Body.String(), w.Header()
}

// TestProxyHealthz: /healthz and /livez as kube-proxy's: healthy while
// starting and while nothing waits longer than the timeout for a sync;
// /healthz also 503 while the node is leaving, /livez not.
func TestProxyHealthz(t *testing.T) {
	clk := newFakeClock()
	m := NewMetrics()
	h := NewProxyHealth(time.Minute)
	h.now, h.counts = clk.now, m.answered
	code := func(f func(http.ResponseWriter)) int { c, _, _ := get(f); return c }
	h.QueuedUpdate()
	clk.add(10 * time.Minute)
	if c := code(h.ServeHealthz); c != 200 {
		t.Errorf("never synced (starting): /healthz %d, want 200", c)
	}
	h.Updated()
	h.QueuedUpdate()
	clk.add(119 * time.Second)
	if c := code(h.ServeHealthz); c != 200 {
		t.Errorf("a change waiting 119 s (timeout 2 min): /healthz %d, want 200", c)
	}
	clk.add(2 * time.Second)
	c, body, hdr := get(h.ServeHealthz)
	if c != 503 || code(h.ServeLivez) != 503 {
		t.Errorf("a change waiting 121 s: /healthz %d, /livez %d, want 503", c, code(h.ServeLivez))
	}
	if hdr.Get("Content-Type") != "application/json" || hdr.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(body, `"nodeEligible": true`) {
		t.Errorf("headers %v body %s, want kube-proxy's", hdr, body)
	}
	h.Updated()
	if c := code(h.ServeHealthz); c != 200 {
		t.Errorf("synced: /healthz %d, want 200", c)
	}
	h.SetLeaving(true)
	c, body, _ = get(h.ServeHealthz)
	if c != 503 || code(h.ServeLivez) != 200 || !strings.Contains(body, `"nodeEligible": false`) {
		t.Errorf("node leaving: /healthz %d (%s), /livez %d; want 503 with nodeEligible false, 200", c, body, code(h.ServeLivez))
	}
	if got := counter(t, m.healthz.WithLabelValues("503")); got != 2 {
		t.Errorf("kubeproxy_proxy_healthz_total{code=503} %v, want 2", got)
	}
}

// TestSyncerHealth: a change the table has not taken within the timeout
// turns /healthz 503 until the sync succeeds.
func TestSyncerHealth(t *testing.T) {
	clk := newFakeClock()
	h := NewProxyHealth(time.Minute)
	h.now = clk.now
	tab := newRecTable()
	synced := make(chan struct{}, 10)
	st, _ := startSyncer(t, tab, Config{Resync: time.Hour, Health: h, Synced: func(*svcmodel.Snapshot, bool) {
		select {
		case synced <- struct{}{}:
		default:
		}
	}})
	tab.next(t)
	<-synced // (its health recorded)
	gate := make(chan struct{})
	tab.mu.Lock()
	tab.gate = gate
	tab.mu.Unlock()
	s0, _ := service(0, "s0")
	st.SetService(s0)
	tab.next(t) // waits at the gate
	clk.add(3 * time.Minute)
	if c, _, _ := get(h.ServeHealthz); c != 503 {
		t.Errorf("a change stuck 3 min: /healthz %d, want 503", c)
	}
	tab.mu.Lock()
	tab.gate = nil
	tab.mu.Unlock()
	close(gate)
	for deadline := time.Now().Add(time.Minute); !h.Healthy(); {
		if time.Now().After(deadline) {
			t.Fatal("still unhealthy a minute after the sync")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHealthChecks: a LoadBalancer Local Service's health check node port
// answers 200 with local ready endpoints, 503 without, kube-proxy's body
// and headers, and closes when the Service goes.
func TestHealthChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	healthy := atomic.Bool{}
	healthy.Store(true)
	hc := &HealthChecks{Healthy: healthy.Load}
	t.Cleanup(hc.Close)
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	name := svcmodel.PortName{Namespace: "ns", Name: "web", Port: "http"}
	localEP := svcmodel.Endpoint{Addr: netip.MustParseAddr("10.0.0.1"), Port: 80, Ready: true, Local: true}
	sync := func(eps ...svcmodel.Endpoint) {
		t.Helper()
		if err := hc.Sync(&svcmodel.Snapshot{Ports: []svcmodel.ServicePort{{Name: name, Family: svcmodel.IPv4, HealthCheckNodePort: port, LocalEndpoints: eps}}}, lo, false); err != nil {
			t.Fatal(err)
		}
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	ask := func() (int, map[string]any, http.Header) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
		return resp.StatusCode, body, resp.Header
	}
	// No NodePort address: served on none (not on every one).
	if err := hc.Sync(&svcmodel.Snapshot{Ports: []svcmodel.ServicePort{{Name: name, Family: svcmodel.IPv4, HealthCheckNodePort: port}}}, nil, false); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Error("no NodePort address, yet the health check answers on 127.0.0.1")
	}
	hc.Close()
	sync()
	if c, body, hdr := ask(); c != 503 || body["localEndpoints"] != 0.0 || hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("no local endpoint: %d %v %v, want 503 with localEndpoints 0", c, body, hdr)
	}
	sync(localEP)
	c, body, _ := ask()
	if c != 200 || body["localEndpoints"] != 1.0 || body["serviceProxyHealthy"] != true ||
		fmt.Sprint(body["service"]) != "map[name:web namespace:ns]" {
		t.Errorf("a local endpoint: %d %v, want 200 with kube-proxy's body", c, body)
	}
	healthy.Store(false)
	if c, body, _ := ask(); c != 503 || body["serviceProxyHealthy"] != false {
		t.Errorf("proxy unhealthy: %d %v, want 503", c, body)
	}
	if err := hc.Sync(nil, lo, false); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the Service gone, its health check still answers")
	}
}

// counter is the value of a counter.
func counter(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// TestMetricNames: the metrics carry kube-proxy's names, and a sync of a
// slice with a trigger time is observed as network programming latency.
func TestMetricNames(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg.Register); err != nil {
		t.Fatal(err)
	}
	tab := newRecTable()
	synced := make(chan struct{}, 10)
	st, _ := startSyncer(t, tab, Config{Resync: time.Hour, Metrics: m, Synced: func(*svcmodel.Snapshot, bool) {
		select {
		case synced <- struct{}{}:
		default:
		}
	}})
	<-synced
	s0, e0 := service(0, "s0")
	e0.TriggerTime = time.Now().Add(-time.Second)
	st.SetService(s0)
	st.SetSlice(e0)
	for deadline := time.Now().Add(time.Minute); programmingCount(t, reg) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // (the sync's metrics come after its Synced)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
	}
	for _, name := range []string{"kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
		"kubeproxy_network_programming_duration_seconds", "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
		"kubeproxy_sync_full_proxy_rules_duration_seconds", "kubeproxy_sync_proxy_rules_endpoint_changes_total"} {
		if !got[name] {
			t.Errorf("no metric %s (have %v)", name, got)
		}
	}
	if n := programmingCount(t, reg); n != 1 {
		t.Errorf("network programming latency observed %d times, want 1 (the slice's trigger time)", n)
	}
}

// programmingCount is the sample count of the network programming
// histogram.
func programmingCount(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "kubeproxy_network_programming_duration_seconds" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// checkTable is a recording table that is a Checker: the first check's
// read (or, with a syncer that resyncs on its loop, the first periodic
// Resync) says so on started and waits for hold to be closed.
type checkTable struct {
	*recTable
	started         chan string
	hold            chan struct{}
	finished        chan bool
	resyncs, checks atomic.Int32
}

func (c *checkTable) Resync(s *svcmodel.Snapshot) error {
	if c.resyncs.Add(1) == 2 { // (the first sync is not the periodic one)
		c.started <- "resync"
		<-c.hold
	}
	return c.recTable.Resync(s)
}

func (c *checkTable) BeginCheck() (func() error, func(bool) ([]string, error)) {
	first := c.checks.Add(1) == 1
	run := func() error {
		if first {
			c.started <- "check"
			<-c.hold
		}
		return nil
	}
	return run, func(repair bool) ([]string, error) {
		if first {
			c.finished <- repair
		}
		return nil, nil
	}
}

// TestSyncerChangeDuringResync: a change that comes while the periodic
// resync reads the table is applied before that read ends (the read is
// off the loop: at 10,000 Services it takes seconds, and a change waited
// for it, one change's p99 of 17 s in the bench); the check is finished
// on the loop after it.
func TestSyncerChangeDuringResync(t *testing.T) {
	tab := &checkTable{recTable: newRecTable(), started: make(chan string, 1), hold: make(chan struct{}), finished: make(chan bool, 1)}
	st, _ := startSyncer(t, tab, Config{Resync: 10 * time.Millisecond})
	t.Cleanup(func() {
		go func() {
			for range tab.calls {
			}
		}()
	}) // (before the syncer stops: resyncs go on)
	if c := tab.next(t); !c.full {
		t.Fatalf("first call %+v, want a Resync", c)
	}
	select {
	case what := <-tab.started:
		t.Logf("the periodic %s is under way", what)
	case <-time.After(time.Minute):
		t.Fatal("no periodic resync within a minute")
	}
	s0, e0 := service(0, "s0")
	st.SetSlice(e0)
	st.SetService(s0)
	select {
	case c := <-tab.calls:
		if c.full || !has(c.snap, "s0") {
			t.Errorf("during the resync: %+v, want s0's Apply", c)
		}
	case <-time.After(30 * time.Second):
		t.Error("s0 was not applied while the periodic resync read the table (30 s): the change waits for the resync")
	}
	close(tab.hold)
	select {
	case repair := <-tab.finished:
		if !repair {
			t.Error("the check was finished without its repair")
		}
	case <-time.After(time.Minute):
		t.Error("the check was not finished within a minute of its read")
	}
}
