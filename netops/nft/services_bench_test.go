package nft

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops/nstest"
)

// BenchmarkServicesApply: the services table's first sync and one change
// (an endpoint of one Service leaves, or comes back) at 1,000, 10,000 and
// 30,000 Services x 4 endpoints (each a ClusterIP and, for the first
// 2,768, a NodePort), on the kernel in a namespace of its own (root).
// first-sync: Apply on a namespace without the table (the table deleted
// between iterations, outside the timer); one-change: Apply of a snapshot
// that differs from the last in one Service.
//
//	go test -run '^$' -bench ServicesApply -benchtime 3x ./netops/nft
func BenchmarkServicesApply(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		snap, other := sortedSnap(manySnap(n, 4)), sortedSnap(manySnap(n, 4))
		other.Ports[n/2].ClusterEndpoints = other.Ports[n/2].ClusterEndpoints[1:]
		b.Run(fmt.Sprintf("services=%d/first-sync", n), func(b *testing.B) {
			h, err := Open(nstest.NewNS(b, "svcb"))
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			for b.Loop() {
				b.StopTimer()
				s := NewServices(h, ServicesOptions{})
				if err := s.Delete(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := s.Apply(snap); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("services=%d/one-change", n), func(b *testing.B) {
			h, err := Open(nstest.NewNS(b, "svcb"))
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			s := NewServices(h, ServicesOptions{})
			if err := s.Apply(snap); err != nil {
				b.Fatal(err)
			}
			i := 0
			changed := []svcmodel.ServiceName{{Namespace: "ns", Name: other.Ports[n/2].Name.Name}}
			for b.Loop() {
				next, prev := other, snap
				if i%2 == 1 {
					next, prev = snap, other
				}
				i++
				// (as the watcher numbers them: only the Service that changed is compared)
				next.Seq, next.Partial, next.Changed = prev.Seq+1, true, changed
				if err := s.Apply(next); err != nil {
					b.Fatal(err)
				}
			}
			if s.st == nil {
				b.Fatal("Apply resynced")
			}
		})
	}
}

// BenchmarkServicesResync: a resync of the services table that finds
// nothing to repair, at 10,000 and 30,000 Services x 4 endpoints (root).
//
//	go test -run '^$' -bench ServicesResync -benchtime 3x ./netops/nft
func BenchmarkServicesResync(b *testing.B) {
	for _, n := range []int{10000, 30000} {
		snap := manySnap(n, 4)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			h, err := Open(nstest.NewNS(b, "svcb"))
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			s := NewServices(h, ServicesOptions{})
			if err := s.Apply(snap); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := s.Resync(snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkServicesState: the heap the table's kept state (what Apply
// compares a change with) holds at 10,000 Services x 4 endpoints, as
// MiB/state; measured, not asserted (go test -run '^$' -bench
// ServicesState -benchtime 1x ./netops/nft; with -memprofile for where).
func BenchmarkServicesState(b *testing.B) {
	snap := sortedSnap(manySnap(10000, 4))
	s := NewServices(nil, ServicesOptions{})
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		st := s.render(snap)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(st)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB/state")
	}
}

// BenchmarkServicesCheckHeap: the heap the periodic check holds beside
// the agent's own state at 30,000 Services x 4 endpoints, as MiB: the
// whole rendering with one shard's specs (before) and the outline of the
// kept state with the largest shard's chains, sets and specs (the check:
// outline, renderShard). Measured, not asserted
// (go test -run '^$' -bench ServicesCheckHeap -benchtime 1x ./netops/nft).
func BenchmarkServicesCheckHeap(b *testing.B) {
	snap := sortedSnap(manySnap(30000, 4))
	s := NewServices(nil, ServicesOptions{})
	held := func(build func() any) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		v := build()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(v)
		return float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
	}
	for b.Loop() {
		whole := held(func() any {
			st := s.render(snap)
			return []any{st, st.shardSpecs(0)}
		})
		kept := s.render(snap)
		r := s.renderer(snap)
		var ol *svcState
		outlineMiB := held(func() any {
			ol = outline(r, snap, slices.Collect(maps.Values(kept.ports)))
			return ol
		})
		var shard float64
		for i := range svcShards {
			shard = max(shard, held(func() any {
				ol.renderShard(r, i)
				return ol.shardSpecs(i)
			}))
			ol.renderShard(nil, i)
		}
		b.ReportMetric(whole, "MiB-whole")
		b.ReportMetric(outlineMiB+shard, "MiB-outline+shard")
		runtime.KeepAlive(kept)
	}
}

// BenchmarkServicesNewService: one Service created (its chain, its rule
// and its frontend element: what make bench-services times end to end)
// and deleted again, at 10,000 and 30,000 Services x 4 endpoints, on the
// kernel in a namespace of its own (root); p50-ms and p99-ms are of the
// creates' Apply, which is all but the kernel's commit (its validation
// of the Service's shard table: docs/benchmarks.md).
//
//	go test -run '^$' -bench 'ServicesNewService/services=30000' -benchtime 30x ./netops/nft
func BenchmarkServicesNewService(b *testing.B) {
	for _, n := range []int{10000, 30000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			with := sortedSnap(manySnap(n+1, 4))
			k := len(with.Ports) / 2
			without := &svcmodel.Snapshot{NodePortAddrs: with.NodePortAddrs, ClusterCIDRs: with.ClusterCIDRs,
				Ports: slices.Delete(slices.Clone(with.Ports), k, k+1)}
			changed := []svcmodel.ServiceName{{Namespace: "ns", Name: with.Ports[k].Name.Name}}
			h, err := Open(nstest.NewNS(b, "svcb"))
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			s := NewServices(h, ServicesOptions{})
			if err := s.Apply(without); err != nil {
				b.Fatal(err)
			}
			var ms []float64
			for b.Loop() {
				with.Seq, with.Partial, with.Changed = without.Seq+1, true, changed
				t0 := time.Now()
				if err := s.Apply(with); err != nil {
					b.Fatal(err)
				}
				ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
				b.StopTimer()
				without.Seq, without.Partial, without.Changed = with.Seq+1, true, changed
				if err := s.Apply(without); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			if s.st == nil {
				b.Fatal("Apply resynced")
			}
			slices.Sort(ms)
			b.ReportMetric(ms[len(ms)/2], "p50-ms")
			b.ReportMetric(ms[min(len(ms)-1, len(ms)*99/100)], "p99-ms")
		})
	}
}
