// Package gcburst lets a burst of allocation (a full sync's one
// transaction: hundreds of MB allocated over a live heap of tens) run at a
// higher GC percent than the agent's low one (cmd/cnibox-agent's gc.go
// keeps the heap's headroom at a few MB, which at a 60 MB live heap is a
// collection every 6 MB allocated: the first sync of 10,000 Services took
// 5.1 s at that, 2.3 s at GOGC=100). The agent's tuner leaves the percent
// alone while a burst runs and sets its own again after it.
//
// A burst's percent gives the heap Headroom bytes over what is live,
// between MinPercent and MaxPercent (Go's default): a small heap collects
// as Go would by default, a large one does not double (at 30,000
// Services, ~170 MB live, the periodic check at 100% let the heap reach
// 824 MB). It is sized when the burst begins and again after each
// collection (Tune), as the burst's own live heap grows: a first sync of
// 30,000 Services starts over ~60 MB live and ends over ~350 MB.
package gcburst

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The bounds of a burst's GC percent, and the headroom it sizes to.
const (
	MaxPercent = 100
	MinPercent = 25
	Headroom   = 64 << 20
)

var (
	mu      sync.Mutex
	running int
	before  int
	// live reads the live heap (a variable for the tests).
	live = liveHeap
)

// PercentFor is a burst's GC percent over a live heap of n bytes.
func PercentFor(n uint64) int {
	if n == 0 {
		return MaxPercent
	}
	return int(min(max(100*Headroom/n, MinPercent), MaxPercent))
}

func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Begin starts a burst; call the returned end when it is over (bursts may
// overlap: the percent is put back when the last ends). A percent already
// as high as the burst's, or GC off, is left alone.
func Begin() (end func()) {
	mu.Lock()
	if running == 0 {
		p := PercentFor(live())
		before = debug.SetGCPercent(p)
		if before >= p || before < 0 {
			debug.SetGCPercent(before)
			before = -1 // nothing to put back
		}
	}
	running++
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if running--; running == 0 && before >= 0 {
				debug.SetGCPercent(before)
			}
		})
	}
}

// Tune is the agent's tuner's word after a collection that found live
// bytes live, wanting percent p: outside a burst it sets p; in a burst
// that set its own percent, p is what the burst's end puts back and the
// burst's percent is sized to live again.
func Tune(live uint64, p int) {
	mu.Lock()
	defer mu.Unlock()
	if running == 0 {
		debug.SetGCPercent(p)
		return
	}
	if before >= 0 {
		before = p
		debug.SetGCPercent(PercentFor(live))
	}
}
