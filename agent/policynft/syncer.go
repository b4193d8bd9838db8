package policynft

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// View runs f with the model under its owner's lock (the watcher's). The
// model is valid during f only, unless f returns true (keeps it): then it
// never changes (the engine copies it on its next change), and f's caller
// reads it after the lock is given back.
type View = func(f func(*policymodel.Model) (keep bool))

// ResyncEvery makes Run replace the whole table with the model every d
// (0: never), which puts back what someone else changed in it: a rule or
// a chain deleted, a set flushed, the table gone. Call it before Run.
func (s *Sink) ResyncEvery(d time.Duration) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	s.resync = d
}

// retryMin and retryMax bound the wait before Run tries again after a
// failed transaction (doubling from the first).
const (
	retryMin = 100 * time.Millisecond
	retryMax = 30 * time.Second
)

// Run commits what Apply queues until ctx ends: as soon as a change is
// queued and the last transaction is done, it takes every change queued
// so far and commits them as one, so that nothing waits for a timer and a
// burst of changes costs a few transactions, not one each. The change is
// made from the model under view's lock (a full sync's: from the model
// kept, after the lock); the transaction, the index and the metrics' note
// of the rules are done outside it (and the index outside the Sink's own
// lock too). A failed transaction is followed by a
// full sync, at once and then after a growing wait (retryMin..retryMax),
// logged to log. Call Run after the first Apply: Apply only queues while
// it runs. Once it returns, the next Apply commits a full sync at once,
// and Run may be called again after it.
func (s *Sink) Run(ctx context.Context, view View, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	if s.dns != nil {
		s.dns.setView(view)
		defer s.dns.setView(nil)
	}
	s.qmu.Lock()
	s.async = true
	every := s.resync
	dirty := s.q.dirty
	s.qmu.Unlock()
	defer func() {
		// The next Apply commits at once, and replaces the whole table:
		// it comes from another watch (the policy watcher watching again
		// from the start), whose deltas begin from nothing.
		s.qmu.Lock()
		s.async = false
		s.q.requeue()
		s.qmu.Unlock()
	}()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	if dirty {
		s.wake() // queued before Run
	}
	wait := time.Duration(0)
	for {
		resync := false
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-tick:
			resync = true
			s.qmu.Lock()
			s.q.requeue()
			s.qmu.Unlock()
		}
		if err := s.sync(view, resync); err != nil {
			wait = min(max(2*wait, retryMin), retryMax)
			log.Error("network policy: the transaction failed; a full sync follows", "err", err, "retry in", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			s.wake()
			continue
		}
		wait = 0
	}
}

// wake makes Run look at the queue.
func (s *Sink) wake() {
	select {
	case s.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Wait blocks until every change Apply queued before the call is
// committed, or ctx ends (tests, benchmarks).
func (s *Sink) Wait(ctx context.Context) error {
	s.qmu.Lock()
	want := s.q.n
	s.qmu.Unlock()
	for {
		s.qmu.Lock()
		done, ch := s.done, s.doneCh
		s.qmu.Unlock()
		if done >= want {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// batch is one transaction and what the Sink notes when it is committed.
type batch struct {
	c      *nft.PolicyChange
	n      uint64 // the last change it holds
	live   []netip.Addr
	rules  *policymodel.Rules // nil: the rules did not change
	node   string
	sets   int
	resync bool
}

// sync takes the queue and commits it (if anything is queued), then, if
// that fails and it was not a full sync already, a full sync at once. A
// failure leaves a full sync queued.
func (s *Sink) sync(view View, resync bool) error {
	b := s.take(view, resync)
	if b == nil {
		return nil
	}
	err := s.commit(b)
	if err != nil && !b.c.Full {
		// The table and the model parted (an element the kernel did not
		// have, say, or the table gone under it): a full sync puts it right.
		s.requeue()
		if b = s.take(view, false); b != nil {
			err = s.commit(b)
		}
	}
	if err != nil {
		s.requeue()
	}
	return err
}

func (s *Sink) requeue() {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	s.q.requeue()
}

// take makes the batch of what is queued (nil: nothing is queued). A
// delta's change is made under view's lock, copying what it holds of the
// model (the delta's sets); a full sync keeps the model, which then never
// changes, and is made of it after the lock is given back (it copied
// every set of the model under the watcher's lock).
func (s *Sink) take(view View, resync bool) *batch {
	var (
		b    *batch
		kept *policymodel.Model
		d    policymodel.Delta
	)
	view(func(m *policymodel.Model) bool {
		s.qmu.Lock()
		if !s.q.dirty {
			s.qmu.Unlock()
			return false
		}
		var full bool
		var n uint64
		d, full, n = s.q.take()
		s.qmu.Unlock()
		full = full || !s.synced.Load()
		b = &batch{n: n, live: localAddrs(m), node: m.Node, sets: len(m.Sets), resync: resync && full}
		if full {
			kept = m
			return true
		}
		b.c = detach(Change(m, d, false))
		return false
	})
	if kept != nil {
		b.c = Change(kept, d, true)
	}
	if b != nil && b.c.Rules != nil {
		b.rules = b.c.Rules
	}
	return b
}

// detach copies what c holds of the model (its rules and sets), so that
// it stays valid once the model's lock is given back. The rules' policies
// are not copied: a compiled policy is never changed, only replaced.
func detach(c *nft.PolicyChange) *nft.PolicyChange {
	if c.Rules != nil {
		r := *c.Rules
		c.Rules = &r
	}
	for i, set := range c.Sets {
		c.Sets[i] = policymodel.NewSet(set.ID, set.Kind, set.Key, set.Elems()...)
	}
	return c
}

// commit commits b, then notes it: the stats and the metrics' rules under
// the Sink's lock, the store's index after it.
func (s *Sink) commit(b *batch) error {
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	s.mu.Lock()
	b.c.Resolved, b.c.Closed = b.live, closed(s.live, b.live)
	start := time.Now()
	err := s.h.ApplyPolicy(b.c)
	s.stats.LastSync = time.Since(start)
	if err != nil {
		s.stats.Failed++
		s.mu.Unlock()
		return err
	}
	s.synced.Store(true)
	s.live = b.live
	s.stats.Applied++
	if b.resync {
		s.stats.Resyncs++
	}
	s.stats.Sets = b.sets
	index := b.rules != nil && s.index
	if b.rules != nil {
		s.stats.Rules = countRules(b.rules)
		s.noteRules(b.rules)
	}
	dir := s.indexDir
	s.mu.Unlock()

	s.qmu.Lock()
	s.done = max(s.done, b.n)
	close(s.doneCh)
	s.doneCh = make(chan struct{})
	s.qmu.Unlock()

	if index {
		err := writeIndex(dir, b.node, b.rules)
		s.mu.Lock()
		s.stats.IndexErr = err
		s.mu.Unlock()
	}
	return nil
}
