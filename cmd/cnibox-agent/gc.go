package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/cnibox/cnibox/internal/gcburst"
)

// agentGCPercent: the agent's live heap is about 1 MB, so the Go runtime's
// floor of a 4 MB heap goal (at GOGC=100) is most of its anonymous memory.
// Half of it keeps the resident set ~1.5 MB lower for a few more
// collections of a 1 MB heap (well under a millisecond each). $GOGC still
// wins.
const agentGCPercent = 50

// A heap that grows with the cluster (every pod of it with NetworkPolicy
// on: ~36 MB live at 50,000 pods) gets a headroom of gcHeadroom bytes
// rather than a share of itself, down to minGCPercent. At 50,000 pods and
// 1,000 policies (docs/benchmarks.md) that took the agent from 73.4 MiB
// RSS and a 104 MiB peak at GOGC=50 to 67.3 and 77.7 MiB, for a collection
// every few seconds at most under a pod churn of 100/s (0.22 ms of CPU per
// change either way). A heap under 12 MB keeps agentGCPercent.
const (
	gcHeadroom   = 6 << 20
	minGCPercent = 10
)

func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(agentGCPercent)
		tuneGCAfterEachCycle()
	}
}

// gcPercentFor is the GC percent for a live heap of live bytes.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return agentGCPercent
	}
	return int(min(max(100*gcHeadroom/live, minGCPercent), agentGCPercent))
}

// gcSentinel is garbage whose cleanup runs after the collection that finds
// it (large enough not to share a tiny block with other objects).
type gcSentinel [64]byte

// tuneGCAfterEachCycle sets the GC percent from the live heap after every
// collection, one cleanup at a time: idle, it costs nothing (no timer).
func tuneGCAfterEachCycle() {
	runtime.AddCleanup(new(gcSentinel), func(struct{}) {
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			live := s[0].Value.Uint64()
			// (during a full sync's burst, this percent is put back at
			// its end and the burst's own is sized to live: gcburst)
			gcburst.Tune(live, gcPercentFor(live))
		}
		tuneGCAfterEachCycle()
	}, struct{}{})
}
