package flowlog

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

const (
	// MaxPairs is how many (source, destination) pairs the rate limit
	// counts apart in a summary's window; the records of further pairs are
	// counted as Other. It bounds the limiter's memory whatever the flood.
	MaxPairs = 64
	// TopPairs is how many pairs a suppressed record names.
	TopPairs = 10
	// SummaryInterval is how often at most a suppressed record is written.
	SummaryInterval = time.Second
)

// bucket is a token bucket: rate tokens a second up to burst, one a record.
// It starts full.
type bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

// refill adds the tokens of the time since the last refill (a new bucket
// is full). A clock that went back adds nothing.
func (b *bucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.tokens = b.burst
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
	}
	if now.After(b.last) {
		b.last = now
	}
}

// pairKey is what a dropped record is counted under.
type pairKey struct{ src, dst netip.Addr }

// tally counts the records dropped since the window began: per pair for
// the first MaxPairs pairs, the rest together. Its map never holds more
// than MaxPairs entries.
type tally struct {
	count uint64
	since time.Time
	pairs map[pairKey]uint64
	other uint64
	// nss counts per source namespace (External for no pod's), the first
	// MaxPairs of them; nsOther the rest.
	nss     map[string]uint64
	nsOther uint64
}

// NamespaceCount is how many records of one source namespace a summary's
// window dropped.
type NamespaceCount struct {
	Namespace string `json:"namespace"`
	Count     uint64 `json:"count"`
}

// add counts one dropped record of src -> dst at now.
func (t *tally) add(src Endpoint, dst netip.Addr, now time.Time) {
	if t.count == 0 {
		t.since = now
	}
	t.count++
	ns := src.Namespace
	if ns == "" {
		ns = External
	}
	if _, ok := t.nss[ns]; ok || len(t.nss) < MaxPairs {
		if t.nss == nil {
			t.nss = make(map[string]uint64)
		}
		t.nss[ns]++
	} else {
		t.nsOther++
	}
	k := pairKey{src.IP, dst}
	if _, ok := t.pairs[k]; ok || len(t.pairs) < MaxPairs {
		if t.pairs == nil {
			t.pairs = make(map[pairKey]uint64, MaxPairs)
		}
		t.pairs[k]++
		return
	}
	t.other++
}

// due reports whether the window holds drops and is SummaryInterval old at now.
func (t *tally) due(now time.Time) bool {
	return t.count > 0 && now.Sub(t.since) >= SummaryInterval
}

// summary is the window's Summary (nil when nothing was dropped); the
// window starts again, empty.
func (t *tally) summary() *Summary {
	if t.count == 0 {
		return nil
	}
	s := &Summary{Count: t.count, Since: t.since.UTC(), Other: t.other, NamespacesOther: t.nsOther}
	for ns, n := range t.nss {
		s.Namespaces = append(s.Namespaces, NamespaceCount{Namespace: ns, Count: n})
	}
	slices.SortFunc(s.Namespaces, func(a, b NamespaceCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace, b.Namespace)
	})
	clear(t.nss)
	t.nsOther = 0
	for k, n := range t.pairs {
		s.Top = append(s.Top, Pair{Src: k.src, Dst: k.dst, Count: n})
	}
	slices.SortFunc(s.Top, func(a, b Pair) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		if c := a.Src.Compare(b.Src); c != 0 {
			return c
		}
		return a.Dst.Compare(b.Dst)
	})
	s.Top = s.Top[:min(len(s.Top), TopPairs)]
	clear(t.pairs)
	t.count, t.other, t.since = 0, 0, time.Time{}
	return s
}
