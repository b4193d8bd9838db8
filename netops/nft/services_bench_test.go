package nft

import (
	"fmt"
	"runtime"
	"testing"

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
