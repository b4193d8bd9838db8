package gcburst

import (
	"runtime/debug"
	"testing"
)

func get() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }

// withLive makes the bursts of one test see a live heap of n bytes.
func withLive(t *testing.T, n uint64) {
	orig := live
	live = func() uint64 { return n }
	t.Cleanup(func() { live = orig })
}

// A burst runs at its percent; a percent set meanwhile is the one put back
// when the last of overlapping bursts ends; outside a burst Tune sets it.
func TestBurst(t *testing.T) {
	withLive(t, 10<<20) // a small heap: Go's default
	orig := debug.SetGCPercent(20)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	end1 := Begin()
	if p := get(); p != MaxPercent {
		t.Fatalf("in a burst over 10 MB live: GC percent %d, want %d", p, MaxPercent)
	}
	end2 := Begin()
	Tune(10<<20, 15)
	if p := get(); p != MaxPercent {
		t.Fatalf("Tune in a burst over 10 MB live changed the percent to %d", p)
	}
	end1()
	end1() // once
	if p := get(); p != MaxPercent {
		t.Fatalf("one of two bursts ended: GC percent %d, want %d", p, MaxPercent)
	}
	end2()
	if p := get(); p != 15 {
		t.Fatalf("after the bursts: GC percent %d, want 15 (set during them)", p)
	}
	Tune(200<<20, 12)
	if p := get(); p != 12 {
		t.Fatalf("Tune outside a burst: %d, want 12", p)
	}
}

// Over a large live heap a burst gives Headroom bytes, not a doubling, and
// never less than MinPercent; a percent already higher is left alone.
func TestBurstSizedToTheHeap(t *testing.T) {
	orig := debug.SetGCPercent(10)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, MaxPercent},
		{32 << 20, MaxPercent},
		{128 << 20, 50},
		{170 << 20, 37},
		{1 << 30, MinPercent},
	} {
		withLive(t, c.live)
		end := Begin()
		if p := get(); p != c.want {
			t.Errorf("burst over %d MiB live: GC percent %d, want %d", c.live>>20, p, c.want)
		}
		end()
		if p := get(); p != 10 {
			t.Fatalf("after the burst over %d MiB: %d, want 10 back", c.live>>20, p)
		}
	}
	debug.SetGCPercent(400)
	withLive(t, 128<<20)
	end := Begin()
	if p := get(); p != 400 {
		t.Errorf("a percent of 400 before the burst became %d", p)
	}
	Tune(128<<20, 30) // ignored: the burst changed nothing, so there is nothing to put back either
	end()
	if p := get(); p != 400 {
		t.Errorf("after a burst that changed nothing: %d, want 400", p)
	}
}

// A burst's percent follows its live heap: a first sync that begins over a
// small heap and grows it gives the heap Headroom, not a doubling, once
// it is large; the tuner's own percent is still what its end puts back.
func TestBurstFollowsItsHeap(t *testing.T) {
	orig := debug.SetGCPercent(50)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	withLive(t, 20<<20)
	end := Begin()
	if p := get(); p != MaxPercent {
		t.Fatalf("a burst over 20 MiB: %d, want %d", p, MaxPercent)
	}
	Tune(256<<20, 10)
	if p := get(); p != MinPercent {
		t.Errorf("the burst's heap at 256 MiB: %d, want %d", p, MinPercent)
	}
	Tune(100<<20, 10)
	if p := get(); p != 64 {
		t.Errorf("the burst's heap at 100 MiB: %d, want 64", p)
	}
	end()
	if p := get(); p != 10 {
		t.Errorf("after the burst: %d, want the tuner's 10", p)
	}
}
