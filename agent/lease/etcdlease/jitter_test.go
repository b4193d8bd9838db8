package etcdlease

import (
	"testing"
	"time"
)

// After an outage every agent's watch breaks at once and each backs off to
// the same 5 s: with the wait jittered, 5,000 agents relist spread over the
// window instead of together. The waits stay in [d/2, 3d/2), are spread
// evenly over it (ten bins of a 5 s backoff each get 10% +- 2.5% of 5,000
// agents; without jitter one bin would get all of them), and no 100 ms of
// the window sees more than 3% of the agents relist.
func TestWatchRetryJitter(t *testing.T) {
	const agents, d = 5000, 5 * time.Second
	bins := make([]int, 10)
	perSlot := map[time.Duration]int{}
	for range agents {
		w := jitter(d)
		if w < d/2 || w >= 3*d/2 {
			t.Fatalf("jitter(%v) = %v, outside [%v, %v)", d, w, d/2, 3*d/2)
		}
		bins[int((w-d/2)*10/d)]++
		perSlot[w/(100*time.Millisecond)]++
	}
	for i, n := range bins {
		if n < agents*75/1000 || n > agents*125/1000 {
			t.Errorf("bin %d of [%v, %v): %d of %d waits, want 10%% +- 2.5%% (bins %v)", i, d/2, 3*d/2, n, agents, bins)
		}
	}
	for slot, n := range perSlot {
		if n > agents*3/100 {
			t.Errorf("%d of %d agents relist within the same 100 ms (at %v)", n, agents, slot*100*time.Millisecond)
		}
	}
	if got := jitter(0); got != 0 {
		t.Errorf("jitter(0) = %v", got)
	}
}
