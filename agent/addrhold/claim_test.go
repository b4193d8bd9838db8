package addrhold

import (
	"testing"
	"time"
)

// TestClaimFence: the holder's last moment with the address (Holding, and
// the end of a kernel lifetime refreshed while MayRefresh) comes before
// the first moment another node may take the Lease, whatever the renewal's
// round trip, for a holder that dies at any point of its renewal cycle.
func TestClaimFence(t *testing.T) {
	T := DefaultTiming
	t0 := time.Unix(1000, 0)
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond, 1500 * time.Millisecond} {
		// The holder sends a renewal at t0; the API commits it at some
		// point of the round trip; the other node sees the new version
		// at the earliest the moment it was committed, here as early as
		// possible: at the send.
		holder := &Claim{T: T, Self: "a"}
		holder.Done(t0)
		other := &Claim{T: T, Self: "b"}
		rec := Record{Exists: true, Holder: "a", Version: "2"}
		other.Next(rec, t0, true, 0, true)
		// The last refresh of the address's lifetime happens at the
		// latest moment MayRefresh allows, not before the response.
		lastRefresh := time.Time{}
		for at := t0.Add(rtt); at.Before(t0.Add(T.Lease)); at = at.Add(10 * time.Millisecond) {
			if holder.MayRefresh(at) {
				lastRefresh = at
			}
		}
		gone := holder.Deadline() // the agent drops it then at the latest
		if !lastRefresh.IsZero() {
			if k := lastRefresh.Add(T.Lifetime + T.Late); k.After(gone) {
				gone = k
			}
		}
		var takeAt time.Time
		for at := t0; at.Before(t0.Add(10 * T.Lease)); at = at.Add(10 * time.Millisecond) {
			if other.Next(rec, at, true, 0, true) == Take {
				takeAt = at
				break
			}
		}
		if takeAt.IsZero() {
			t.Fatalf("rtt %v: the other node never takes a Lease nobody renews", rtt)
		}
		if !takeAt.After(gone) {
			t.Errorf("rtt %v: the holder may keep the address until %v, another node takes it at %v", rtt, gone.Sub(t0), takeAt.Sub(t0))
		}
		if takeAt.Sub(t0) > T.Lease+20*time.Millisecond {
			t.Errorf("rtt %v: taken %v after the last renewal; want about the Lease's %v", rtt, takeAt.Sub(t0), T.Lease)
		}
	}
}

// TestClaimNext: the actions through a holder's life and a successor's.
func TestClaimNext(t *testing.T) {
	T := DefaultTiming
	t0 := time.Unix(1000, 0)
	c := &Claim{T: T, Self: "a"}
	absent := Record{}
	if got := c.Next(absent, t0, false, 0, true); got != Wait {
		t.Errorf("not eligible, no Lease: %v; want wait", got)
	}
	if got := c.Next(absent, t0, true, 2, true); got != Wait {
		t.Errorf("rank 2, no Lease, at once: %v; want wait (rank 0 goes first)", got)
	}
	if got := c.Next(absent, t0.Add(2*T.RankDelay), true, 2, true); got != Take {
		t.Errorf("rank 2, no Lease, after two rank delays: %v; want take", got)
	}
	c.Done(t0.Add(2 * T.RankDelay))
	mine := Record{Exists: true, Holder: "a", Version: "5"}
	now := t0.Add(2 * T.RankDelay)
	if got := c.Next(mine, now.Add(T.Renew/2), true, 2, true); got != Wait {
		t.Errorf("held, half a renew period on: %v; want wait", got)
	}
	if got := c.Next(mine, now.Add(T.Renew), true, 2, true); got != Renew {
		t.Errorf("held, a renew period on: %v; want renew", got)
	}
	if !c.Holding(now.Add(T.Lease-T.Margin-time.Millisecond)) || c.Holding(now.Add(T.Lease-T.Margin)) {
		t.Errorf("Holding: want true until the Lease less the margin after the renewal, false from then")
	}
	if got := c.Next(mine, now.Add(T.Renew), false, 0, true); got != Release {
		t.Errorf("held, no longer eligible: %v; want release", got)
	}
	other := Record{Exists: true, Holder: "b", Version: "6"}
	if got := c.Next(other, now.Add(time.Second), true, 0, true); got != Wait || c.Holding(now.Add(time.Second)) {
		t.Errorf("another node's record: %v, holding %v; want wait and not holding", got, c.Holding(now.Add(time.Second)))
	}
	restarted := &Claim{T: T, Self: "a"}
	if got := restarted.Next(mine, now, true, 0, true); got != Renew {
		t.Errorf("a restarted agent whose node holds the Lease: %v; want renew", got)
	}
	if got := (&Claim{T: T, Self: "c"}).Next(Record{Exists: true, Version: "7"}, now, true, 0, true); got != Take {
		t.Errorf("a released Lease, rank 0: %v; want take at once", got)
	}
}

// TestClaimIneligibleHolder: a Lease held by a node the gateway does not
// make eligible is nobody's for the routes at once, and an eligible node
// takes it T.Ineligible after it first saw that holder, however often the
// holder renews (a stolen agent token naming its own node); a holder that
// becomes eligible again stands.
func TestClaimIneligibleHolder(t *testing.T) {
	T := DefaultTiming
	t0 := time.Unix(1000, 0)
	c := &Claim{T: T, Self: "b"}
	version := 0
	renewed := func() Record {
		version++
		return Record{Exists: true, Holder: "x", Version: string(rune('a' + version%26))}
	}
	rec := renewed()
	if h := c.Holder(rec, t0, false); h != "" {
		t.Errorf("the ineligible holder routed to: %q", h)
	}
	if h := c.Holder(rec, t0, true); h != "x" {
		t.Errorf("an eligible holder: %q, want x", h)
	}
	var takeAt time.Time
	for at := t0; at.Before(t0.Add(5 * T.Ineligible)); at = at.Add(T.Renew) {
		rec = renewed() // renewed at every step: never free by the Lease's clock
		if c.Next(rec, at, true, 0, false) == Take {
			takeAt = at
			break
		}
	}
	if takeAt.IsZero() || takeAt.Before(t0.Add(T.Ineligible)) || takeAt.After(t0.Add(T.Ineligible+T.Renew)) {
		t.Errorf("taken at %v after first seeing the ineligible holder; want %v", takeAt.Sub(t0), T.Ineligible)
	}
	// The holder eligible again (its node relabelled): its renewed Lease
	// stands.
	c2 := &Claim{T: T, Self: "b"}
	c2.Next(renewed(), t0, true, 0, false)
	for at := t0; at.Before(t0.Add(2 * T.Ineligible)); at = at.Add(T.Renew) {
		if c2.Next(renewed(), at, true, 0, true) == Take {
			t.Fatalf("took a renewed Lease from a holder eligible again, at %v", at.Sub(t0))
		}
	}
}
