package flowlog

import (
	"net/netip"
	"time"
)

// The rate limit is fair (issue 60, finding 6: one pod's flood of denials
// hid 19 of another namespace's 20): a record takes a token from its
// source pod's bucket, its source namespace's and the node's, and only
// when all three have one. A flood from one source spends its own bucket
// (a tenth of the node's rate) and its namespace's (a quarter), never the
// whole node's: the records of every other namespace still fit. Records
// are keyed by their source: the one who sends is the one who floods
// (keyed by the subject, a flood into a victim's namespace would hide
// that namespace's other records). Sources outside the cluster share the
// namespace key External, each address its own source bucket.
const (
	// SourceShare and NamespaceShare are the fractions of the node's rate
	// (and burst) one source address and one namespace may take.
	SourceShare, NamespaceShare = 0.1, 0.25
	// MaxSources and MaxNamespaces bound the buckets kept apart; the
	// sources (namespaces) past them share one bucket. A bucket that has
	// filled up again is forgotten.
	MaxSources, MaxNamespaces = 4096, 1024
	// External is the namespace key of sources that are no pod's.
	External = "(external)"
)

// fair is the node's bucket with a bucket per source and per namespace.
type fair struct {
	node            bucket
	srcs            map[netip.Addr]*bucket
	nss             map[string]*bucket
	srcOver, nsOver bucket // the sources and namespaces past the caps
	rate, burst     float64
	pruned          time.Time
}

func newFair(rate, burst float64) fair {
	return fair{node: bucket{rate: rate, burst: burst}, rate: rate, burst: burst,
		srcs: map[netip.Addr]*bucket{}, nss: map[string]*bucket{},
		srcOver: share(rate, burst, SourceShare), nsOver: share(rate, burst, NamespaceShare)}
}

// share is a bucket of frac of rate and burst (at least one token).
func share(rate, burst, frac float64) bucket {
	return bucket{rate: rate * frac, burst: max(1, burst*frac)}
}

// take reports whether a record from src at now is within all three
// rates, and if so takes its tokens.
func (f *fair) take(src Endpoint, now time.Time) bool {
	if now.Sub(f.pruned) >= SummaryInterval {
		f.prune(now)
	}
	sb := f.srcs[src.IP]
	if sb == nil {
		if len(f.srcs) < MaxSources {
			b := share(f.rate, f.burst, SourceShare)
			sb = &b
			f.srcs[src.IP] = sb
		} else {
			sb = &f.srcOver
		}
	}
	ns := src.Namespace
	if ns == "" {
		ns = External
	}
	nb := f.nss[ns]
	if nb == nil {
		if len(f.nss) < MaxNamespaces {
			b := share(f.rate, f.burst, NamespaceShare)
			nb = &b
			f.nss[ns] = nb
		} else {
			nb = &f.nsOver
		}
	}
	if !sb.has(now) || !nb.has(now) || !f.node.has(now) {
		return false
	}
	sb.tokens--
	nb.tokens--
	f.node.tokens--
	return true
}

// prune forgets the buckets that are full again at now: one that is full
// is the same as a new one.
func (f *fair) prune(now time.Time) {
	f.pruned = now
	for k, b := range f.srcs {
		if b.full(now) {
			delete(f.srcs, k)
		}
	}
	for k, b := range f.nss {
		if b.full(now) {
			delete(f.nss, k)
		}
	}
}

// has refills b to now and reports whether it holds a token (not taken).
func (b *bucket) has(now time.Time) bool {
	b.refill(now)
	return b.tokens >= 1
}

// full reports whether b is full at now.
func (b *bucket) full(now time.Time) bool {
	b.refill(now)
	return b.tokens >= b.burst
}
