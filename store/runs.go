package store

import (
	"bytes"
	"net/netip"

	"github.com/cnibox/cnibox/internal/addrmath"
	bolt "go.etcd.io/bbolt"
)

// The run index keeps the reserved addresses of one family as maximal runs
// of consecutive addresses: key = first address, value = last address. No two
// runs touch (they are merged on reserve and split on release), so the
// address right after a run is always free. That makes "first free address at
// or after A" a single seek, however long the run of reserved addresses is.

// runAt returns the run that contains a.
func runAt(b *bolt.Bucket, a netip.Addr) (start, end netip.Addr, ok bool) {
	if b == nil {
		return start, end, false
	}
	k := addrKey(a)
	c := b.Cursor()
	key, val := c.Seek(k)
	if key != nil && bytes.Equal(key, k) {
		return a, keyAddr(val), true
	}
	if key == nil {
		key, val = c.Last()
	} else {
		key, val = c.Prev()
	}
	if key == nil {
		return start, end, false
	}
	if e := keyAddr(val); e.Compare(a) >= 0 {
		return keyAddr(key), e, true
	}
	return start, end, false
}

// addRun records a newly reserved address a.
func addRun(b *bolt.Bucket, a netip.Addr) error {
	start, end := a, a
	if prev := a.Prev(); prev.IsValid() {
		if s, e, ok := runAt(b, prev); ok && e == prev {
			start = s
		}
	}
	if next := a.Next(); next.IsValid() {
		if v := b.Get(addrKey(next)); v != nil {
			end = keyAddr(v)
			if err := b.Delete(addrKey(next)); err != nil {
				return err
			}
		}
	}
	return b.Put(addrKey(start), addrKey(end))
}

// removeRun records that a is no longer reserved.
func removeRun(b *bolt.Bucket, a netip.Addr) error {
	s, e, ok := runAt(b, a)
	if !ok {
		return nil
	}
	if s == a {
		if err := b.Delete(addrKey(s)); err != nil {
			return err
		}
	} else if err := b.Put(addrKey(s), addrKey(a.Prev())); err != nil {
		return err
	}
	if e != a {
		return b.Put(addrKey(a.Next()), addrKey(e))
	}
	return nil
}

// countRuns counts the reserved addresses in [start, end].
func countRuns(b *bolt.Bucket, start, end netip.Addr) uint64 {
	if b == nil || end.Less(start) {
		return 0
	}
	var total uint64
	add := func(s, e netip.Addr) {
		if s.Less(start) {
			s = start
		}
		if end.Less(e) {
			e = end
		}
		if !e.Less(s) {
			total = addrmath.SatAdd(total, addrmath.Span(s, e))
		}
	}
	if s, e, ok := runAt(b, start); ok {
		add(s, e)
	}
	c := b.Cursor()
	for k, v := c.Seek(addrKey(start)); k != nil; k, v = c.Next() {
		s := keyAddr(k)
		if s == start {
			continue // counted above
		}
		if end.Less(s) {
			break
		}
		add(s, keyAddr(v))
	}
	return total
}
