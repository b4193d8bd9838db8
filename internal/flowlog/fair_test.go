package flowlog

import (
	"net/netip"
	"testing"
	"time"
)

// TestRateLimitFair: a flood of denials (10,000 records a second for 10 s
// of a fake clock) from one pod, then from 200 pods of one namespace,
// then from 10,000 addresses outside the cluster, does not hide another
// namespace's 20 denials spread over the same time: each is written
// (issue 60, finding 6: one pod's flood hid 19 of 20); the flood's
// summaries name its namespace; the limiter keeps at most MaxSources
// source buckets.
func TestRateLimitFair(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flood func(i int) Endpoint
		ns    string // the flood's namespace in the summaries
	}{
		{"one pod", func(int) Endpoint {
			return Endpoint{IP: netip.MustParseAddr("10.88.1.5"), Namespace: "noisy", Pod: "scan-0"}
		}, "noisy"},
		{"a namespace's 200 pods", func(i int) Endpoint {
			return Endpoint{IP: netip.AddrFrom4([4]byte{10, 88, 4, byte(i % 200)}), Namespace: "noisy"}
		}, "noisy"},
		{"10,000 outside addresses", func(i int) Endpoint {
			return Endpoint{IP: netip.AddrFrom4([4]byte{198, 51, byte(i % 10000 >> 8), byte(i % 10000)})}
		}, External},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				n    = 100_000
				step = 100 * time.Microsecond
			)
			t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := &fakeClock{t: t0}
			w, path := testWriter(t, Options{Node: "node-1", Now: clk.Now, MaxSize: 1 << 30}) // the default rate and burst
			victim := Endpoint{IP: netip.MustParseAddr("10.88.9.9"), Port: 5432, Namespace: "quiet", Pod: "db-0"}
			maxSources := 0
			for i := range n {
				now := clk.Add(step)
				rec := Record{Time: now, Verdict: Deny, Direction: Ingress, Proto: "TCP", Src: tc.flood(i), Dst: victim}
				if i%(n/20) == n/40+5 { // 20 of them, evenly spread, between two of the node bucket's refills
					rec.Src = Endpoint{IP: netip.MustParseAddr("10.88.7.7"), Port: uint16(40000 + i/(n/20)), Namespace: "other", Pod: "app-0"}
				}
				if err := w.Write(rec); err != nil {
					t.Fatal(err)
				}
				maxSources = max(maxSources, len(w.limit.srcs))
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			others, named := 0, false
			for _, r := range readLines(t, path) {
				if r.Src.Namespace == "other" {
					others++
				}
				if r.Suppressed != nil {
					for _, c := range r.Suppressed.Namespaces {
						if c.Namespace == "other" {
							t.Errorf("a summary counts %d of namespace other's records as dropped", c.Count)
						}
						named = named || c.Namespace == tc.ns
					}
				}
			}
			if others != 20 {
				t.Errorf("namespace other: %d of its 20 denials written", others)
			}
			if !named {
				t.Errorf("no summary names the flood's namespace %q", tc.ns)
			}
			if maxSources > MaxSources {
				t.Errorf("%d source buckets at once, want at most %d", maxSources, MaxSources)
			}
		})
	}
}
