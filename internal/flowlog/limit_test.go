package flowlog

import (
	"maps"
	"net/netip"
	"testing"
	"time"
)

// TestRateLimitFlood: 100,000 records in 10 s of a fake clock, 60% of
// them from one pair (namespace a) and the rest from 80 sources of 8 other
// namespaces, round robin, which keep the node's bucket empty whatever the
// hot pair's share. The file gets at most Rate*10+Burst of them, and for
// the rest one suppressed record a second at most, each counting exactly
// the records dropped since the one before, the hot pair first with its
// own count, the pairs past MaxPairs as other, and the counts by source
// namespace; the limiter never tracks more than MaxPairs pairs.
func TestRateLimitFlood(t *testing.T) {
	const (
		n     = 100_000
		step  = 100 * time.Microsecond // 10,000 records a second
		rate  = 1000
		burst = 5000
	)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: t0}
	w, path := testWriter(t, Options{Node: "node-1", Rate: rate, Burst: burst, Now: clk.Now, MaxSize: 1 << 30})
	hotSrc, hotDst := netip.MustParseAddr("10.88.1.5"), netip.MustParseAddr("10.88.2.7")
	pair := func(i int) (netip.Addr, netip.Addr) {
		if i%5 < 3 {
			return hotSrc, hotDst
		}
		return netip.AddrFrom4([4]byte{10, 99, 0, byte(i % 80)}), hotDst
	}
	nsOf := func(src netip.Addr) string {
		if src == hotSrc {
			return "a"
		}
		return string(rune('b' + src.As4()[3]%8))
	}
	timeOf := func(i int) time.Time { return t0.Add(time.Duration(i+1) * step) }
	maxPairs := 0
	for i := range n {
		now := clk.Add(step)
		src, dst := pair(i)
		rec := Record{Time: now, Verdict: Deny, Direction: Egress, Proto: "TCP",
			Src: Endpoint{IP: src, Port: 40000, Namespace: nsOf(src)}, Dst: Endpoint{IP: dst, Port: 80}}
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		maxPairs = max(maxPairs, len(w.drops.pairs))
	}
	end := clk.Add(SummaryInterval)
	if err := w.Flush(end); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if maxPairs > MaxPairs {
		t.Errorf("the limiter tracked %d pairs at once, want at most %d", maxPairs, MaxPairs)
	}

	written := map[time.Time]bool{}
	var sums []Record
	for _, r := range readLines(t, path) {
		if r.Verdict == Suppressed {
			sums = append(sums, r)
			continue
		}
		written[r.Time] = true
	}
	secs := float64(n) * step.Seconds()
	if limit := int(rate*secs) + burst; len(written) > limit || len(written) < limit-10 {
		t.Errorf("%d records written, want at most (and about) %d = rate*%gs+burst", len(written), limit, secs)
	}
	if len(sums) == 0 || len(sums) > int(secs)+1 {
		t.Fatalf("%d suppressed records over %gs, want one a second", len(sums), secs)
	}
	var total uint64
	prev, i := time.Time{}, 0
	for k, s := range sums {
		if k > 0 && s.Time.Sub(prev) < SummaryInterval {
			t.Errorf("suppressed record %d at %v, %v after the one before", k, s.Time, s.Time.Sub(prev))
		}
		// What it counts: the records dropped from the one before to it.
		var count, hot, other uint64
		var since time.Time
		byNS := map[string]uint64{}
		tracked := map[pairKey]bool{}
		for ; i < n && timeOf(i).Before(s.Time); i++ {
			if written[timeOf(i)] {
				continue
			}
			if count == 0 {
				since = timeOf(i)
			}
			count++
			src, dst := pair(i)
			byNS[nsOf(src)]++
			if src == hotSrc {
				hot++
			}
			if k := (pairKey{src, dst}); tracked[k] || len(tracked) < MaxPairs {
				tracked[k] = true
			} else {
				other++
			}
		}
		got := s.Suppressed
		switch {
		case got == nil || got.Count != count || !got.Since.Equal(since) || got.Other != other:
			t.Errorf("suppressed record %d: %+v, want count %d since %v other %d", k, got, count, since, other)
		case len(got.Top) == 0 || len(got.Top) > TopPairs:
			t.Errorf("suppressed record %d names %d pairs, want 1 to %d", k, len(got.Top), TopPairs)
		case got.Top[0] != (Pair{Src: hotSrc, Dst: hotDst, Count: hot}):
			t.Errorf("suppressed record %d: top pair %+v, want %v -> %v %d", k, got.Top[0], hotSrc, hotDst, hot)
		case len(got.Namespaces) == 0 || got.Namespaces[0] != (NamespaceCount{Namespace: "a", Count: byNS["a"]}):
			t.Errorf("suppressed record %d: namespaces %+v, want a first with %d", k, got.Namespaces, byNS["a"])
		}
		if got != nil {
			gotNS := map[string]uint64{}
			for _, c := range got.Namespaces {
				gotNS[c.Namespace] = c.Count
			}
			if !maps.Equal(gotNS, byNS) || got.NamespacesOther != 0 {
				t.Errorf("suppressed record %d: by namespace %v (other %d), want %v", k, gotNS, got.NamespacesOther, byNS)
			}
		}
		if s.Node != "node-1" {
			t.Errorf("suppressed record %d: node %q", k, s.Node)
		}
		total += count
		prev = s.Time
	}
	if int(total)+len(written) != n {
		t.Errorf("%d written + %d suppressed = %d, want %d", len(written), total, int(total)+len(written), n)
	}
}

// TestSummaryWhenFloodStops: what was dropped is summed up by Flush once
// the window is a second old, not before, and by Close in any case; a
// window with no drop writes nothing.
func TestSummaryWhenFloodStops(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: t0}
	w, path := testWriter(t, Options{Rate: 1, Burst: 2, Now: clk.Now})
	// each from a source and namespace of its own: the node's bucket is
	// the one that fills (TestRateLimitFair has the others)
	rec := func(i int) Record {
		r := seqRecord(i)
		r.Src.IP, r.Src.Namespace = netip.AddrFrom4([4]byte{10, 88, 3, byte(i)}), "ns"+string(rune('a'+i))
		return r
	}
	for i := range 5 {
		if err := w.Write(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	count := func() (recs, sums int) {
		for _, r := range readLines(t, path) {
			if r.Verdict == Suppressed {
				sums++
			} else {
				recs++
			}
		}
		return recs, sums
	}
	if err := w.Flush(t0.Add(SummaryInterval / 2)); err != nil {
		t.Fatal(err)
	}
	if r, s := count(); r != 2 || s != 0 {
		t.Fatalf("after half a second: %d records, %d suppressed; want 2 and 0", r, s)
	}
	if err := w.Flush(t0.Add(SummaryInterval)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(t0.Add(3 * SummaryInterval)); err != nil {
		t.Fatal(err)
	}
	recs := readLines(t, path)
	if len(recs) != 3 || recs[2].Suppressed == nil || recs[2].Suppressed.Count != 3 {
		t.Fatalf("after a second: %+v, want 2 records and one suppressed of 3", recs)
	}
	clk.Add(time.Second / 10) // not a token's worth
	if err := w.Write(rec(5)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if r, s := count(); r != 2 || s != 2 {
		t.Errorf("after Close: %d records, %d suppressed; want 2 and 2", r, s)
	}
}
