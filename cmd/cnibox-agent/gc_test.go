package main

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// TestGCPercentFollowsTheLiveHeap: with a live heap of ~64 MiB (the
// policy engine at a large cluster) the agent's GC percent comes down to
// minGCPercent after a collection, and goes back to agentGCPercent when
// the heap is small again.
func TestGCPercentFollowsTheLiveHeap(t *testing.T) {
	if p := gcPercentFor(1 << 20); p != agentGCPercent {
		t.Fatalf("1 MiB live: %d%%, want %d%%", p, agentGCPercent)
	}
	percentAfterGC := func(t *testing.T, want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			runtime.GC()
			s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
			metrics.Read(s)
			p := int(s[0].Value.Uint64())
			if p == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GC percent %d%%, want %d%%", p, want)
			}
			time.Sleep(10 * time.Millisecond) // the cleanup runs after the cycle
		}
	}
	big := make([][]byte, 64)
	for i := range big {
		big[i] = make([]byte, 1<<20)
	}
	percentAfterGC(t, minGCPercent)
	runtime.KeepAlive(big)
	big = nil
	percentAfterGC(t, agentGCPercent)
}
