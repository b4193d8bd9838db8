package gcburst

import (
	"runtime/debug"
	"testing"
)

// A burst runs at Percent; a percent set meanwhile is the one put back
// when the last of overlapping bursts ends; outside a burst Set sets it.
func TestBurst(t *testing.T) {
	orig := debug.SetGCPercent(20)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	get := func() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }
	end1 := Begin()
	if p := get(); p != Percent {
		t.Fatalf("in a burst: GC percent %d, want %d", p, Percent)
	}
	end2 := Begin()
	Set(15)
	if p := get(); p != Percent {
		t.Fatalf("Set in a burst changed the percent to %d", p)
	}
	end1()
	end1() // once
	if p := get(); p != Percent {
		t.Fatalf("one of two bursts ended: GC percent %d, want %d", p, Percent)
	}
	end2()
	if p := get(); p != 15 {
		t.Fatalf("after the bursts: GC percent %d, want 15 (set during them)", p)
	}
	Set(12)
	if p := get(); p != 12 {
		t.Fatalf("Set outside a burst: %d, want 12", p)
	}
}
