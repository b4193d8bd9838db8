// Package gcburst lets a burst of allocation (a full sync's one
// transaction: hundreds of MB allocated over a live heap of tens) run at
// the Go runtime's default GC percent instead of the agent's low one
// (cmd/cnibox-agent's gc.go keeps the heap's headroom at a few MB, which
// at a 60 MB live heap is a collection every 6 MB allocated: the first
// sync of 10,000 Services took 5.1 s at that, 2.3 s at GOGC=100). The
// agent's tuner leaves the percent alone while a burst runs and sets its
// own again after it.
package gcburst

import (
	"runtime/debug"
	"sync"
)

// Percent is the GC percent while a burst runs (Go's default).
const Percent = 100

var (
	mu      sync.Mutex
	running int
	before  int
)

// Begin starts a burst; call the returned end when it is over (bursts may
// overlap: the percent is put back when the last ends).
func Begin() (end func()) {
	mu.Lock()
	if running == 0 {
		before = debug.SetGCPercent(Percent)
		if before >= Percent || before < 0 {
			debug.SetGCPercent(before) // already as high, or off: leave it
		}
	}
	running++
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if running--; running == 0 && before < Percent && before >= 0 {
				debug.SetGCPercent(before)
			}
		})
	}
}

// Set sets the GC percent to p unless a burst runs, in which case p is
// what the burst's end puts back.
func Set(p int) {
	mu.Lock()
	defer mu.Unlock()
	if running > 0 {
		if before < Percent && before >= 0 {
			before = p
		}
		return
	}
	debug.SetGCPercent(p)
}
