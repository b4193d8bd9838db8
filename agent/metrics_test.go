package agent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/agent/backend/vxlan"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
)

// renewOnly is a lease backend whose Renew answers renewErr, else extends
// the lease by an hour.
type renewOnly struct {
	lease.Manager
	renewErr error
	exp      time.Time
}

func (r *renewOnly) Renew(_ context.Context, l lease.Lease) (lease.Lease, error) {
	if r.renewErr != nil {
		return lease.Lease{}, r.renewErr
	}
	l.Expiration = r.exp
	return l, nil
}

// deviceless is an agent on o (o.Health with Metrics) with this node's
// lease 10.5.1.0/24 and a vxlan backend with no family enabled: its syncs
// touch no device.
func deviceless(t *testing.T, o Options) *agent {
	t.Helper()
	a := &agent{
		o:     o,
		log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		m:     o.Health.metrics(),
		cfg:   &netconf.Config{},
		peers: map[string]lease.Lease{}, notify: make(chan struct{}, 1),
		own: lease.Lease{Subnet: netip.MustParsePrefix("10.5.1.0/24")},
	}
	be, err := vxlan.New(a.backendEnv())
	if err != nil {
		t.Fatal(err)
	}
	a.be = be
	return a
}

// scrape reads /metrics through the health endpoint into name{labels} -> value.
func scrape(t *testing.T, h *Health) map[string]string {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("/metrics: %d %s", w.Code, w.Body)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			out[line[:i]] = line[i+1:]
		}
	}
	return out
}

// TestMetrics: /metrics follows the agent's events: renewals that succeed
// and fail, the lease held and its expiry, peers added and removed by lease
// updates, full resyncs, and a restarted lease watch; the process and Go
// collectors are there too.
func TestMetrics(t *testing.T) {
	h := &Health{Metrics: NewMetrics()}
	backend := &renewOnly{exp: time.Unix(1900000000, 0)}
	a := deviceless(t, Options{Manager: backend, Health: h, RenewMargin: time.Hour})
	want := func(stage string, exp map[string]string) {
		t.Helper()
		got := scrape(t, h)
		for k, v := range exp {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", stage, k, got[k], v)
			}
		}
	}
	want("start", map[string]string{
		"cnibox_agent_lease_held": "0", "cnibox_agent_lease_renewals_total": "0", "cnibox_agent_peers": "0",
		`cnibox_agent_kernel_sync_errors_total{kind="full"}`: "0", "cnibox_agent_lease_watch_restarts_total": "0",
	})
	if got := scrape(t, h); got["go_goroutines"] == "" || got["process_resident_memory_bytes"] == "" {
		t.Errorf("no Go or process collector: go_goroutines=%q process_resident_memory_bytes=%q",
			got["go_goroutines"], got["process_resident_memory_bytes"])
	}

	ctx := context.Background()
	a.renew(ctx)
	want("renewed", map[string]string{
		"cnibox_agent_lease_held": "1", "cnibox_agent_lease_expiry_timestamp_seconds": "1.9e+09",
		"cnibox_agent_lease_renewals_total": "1", "cnibox_agent_lease_renewal_failures_total": "0",
	})
	backend.renewErr = errors.New("etcd unreachable")
	a.renew(ctx)
	want("renewal failed", map[string]string{
		"cnibox_agent_lease_held": "1", "cnibox_agent_lease_renewals_total": "1", "cnibox_agent_lease_renewal_failures_total": "1",
	})

	peer := func(sn string) lease.Lease {
		return lease.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.9")}}
	}
	a.enqueue(lease.Update{Events: []lease.Event{
		{Type: lease.Added, Lease: peer("10.5.2.0/24")}, {Type: lease.Added, Lease: peer("10.5.3.0/24")},
	}})
	a.applyPending(ctx)
	want("two peers added", map[string]string{
		"cnibox_agent_peers": "2", `cnibox_agent_kernel_sync_duration_seconds_count{kind="updates"}`: "1",
		`cnibox_agent_kernel_sync_errors_total{kind="updates"}`: "0",
	})
	a.enqueue(lease.Update{Events: []lease.Event{{Type: lease.Removed, Lease: peer("10.5.3.0/24")}}})
	a.applyPending(ctx)
	a.fullSync()
	want("one removed, then a resync", map[string]string{
		"cnibox_agent_peers": "1", `cnibox_agent_kernel_sync_duration_seconds_count{kind="updates"}`: "2",
		`cnibox_agent_kernel_sync_duration_seconds_count{kind="full"}`: "1",
	})

	a.enqueue(lease.Update{Snapshot: true, Leases: []lease.Lease{a.own}})
	want("first snapshot", map[string]string{"cnibox_agent_lease_watch_restarts_total": "0"})
	a.enqueue(lease.Update{Snapshot: true, Leases: []lease.Lease{a.own}})
	want("second snapshot", map[string]string{"cnibox_agent_lease_watch_restarts_total": "1"})

	w := httptest.NewRecorder()
	(&Health{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 404 {
		t.Errorf("/metrics without Metrics: %d, want 404", w.Code)
	}
}
