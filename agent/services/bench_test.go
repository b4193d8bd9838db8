package services

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/cnibox/cnibox/agent/cluster"
)

// benchState is a state of n Services of 4 endpoints each, resolved once.
func benchState(b *testing.B, n int) (*State, []*cluster.EndpointSlice) {
	st := NewState(nil)
	var slices []*cluster.EndpointSlice
	for i := range n {
		s, es := service(i, fmt.Sprintf("s%d", i))
		for j := 1; j < 4; j++ {
			e := es.Endpoints[j-1]
			e.Addr = e.Addr.Next()
			es.Endpoints = append(es.Endpoints, e)
		}
		st.SetService(s)
		st.SetSlice(es)
		slices = append(slices, es)
	}
	if snap, _ := st.snapshot(); snap.Len() != n || len(snap.Flat()[0].ClusterEndpoints) != 4 {
		b.Fatalf("%d ports, want %d", snap.Len(), n)
	}
	return st, slices
}

// BenchmarkFirstSnapshot: every Service resolved, 10,000 of them.
func BenchmarkFirstSnapshot(b *testing.B) {
	for b.Loop() {
		benchState(b, 10000)
	}
}

// BenchmarkOneChange: one slice of 30,000 Services' changes; the next
// snapshot.
func BenchmarkOneChange(b *testing.B) {
	st, slices := benchState(b, 30000)
	i := 0
	for b.Loop() {
		es := *slices[i%len(slices)]
		es.Endpoints = es.Endpoints[:len(es.Endpoints)-1+(i/len(slices))%2]
		st.SetSlice(&es)
		st.snapshot()
		i++
	}
}

// BenchmarkStateMemory: the heap the watcher's state holds at 10,000
// Services x 4 endpoints (the slim Services and slices, their resolved
// ports, the last snapshot), as MiB/state; measured, not asserted (with
// -memprofile for where).
func BenchmarkStateMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		st, _ := benchState(b, 10000)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(st)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB/state")
	}
}
