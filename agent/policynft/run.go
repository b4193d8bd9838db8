package policynft

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// ResyncEvery makes Run replace the whole table with the model, and
// write every pod's table again, every d (0: never), which puts back what
// someone else changed in them: a rule or a chain deleted, a set flushed,
// a table gone. Call it before Run.
func (s *Syncer) ResyncEvery(d time.Duration) {
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

// Run commits what Apply queues, and the pod tables that changed, until
// ctx ends: as soon as a change is queued and the last transaction is
// done, it takes every change queued so far and commits them as one, so
// that nothing waits for a timer and a burst of changes costs a few
// transactions, not one each. It takes the model handed over with them
// (claimLocked) and never the watcher's lock; the transaction, the index
// and the metrics' note of the rules are made outside the Syncer's queue
// lock (and the index outside its own lock too). A failed transaction of
// the node's table is followed by a full sync at once; a failure that
// stays (the table's, or a pod table's) is tried again after a growing
// wait (retryMin..retryMax), logged to log, without waiting for a change.
// Once it returns, the next Apply commits at once, and Run may be called
// again after it.
func (s *Syncer) Run(ctx context.Context, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	s.qmu.Lock()
	s.async = true
	every := s.resync
	dirty := s.q.dirty || s.q.pods
	s.qmu.Unlock()
	defer func() {
		s.qmu.Lock()
		s.async = false
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
	// The node's table and the pods' each wait on their own after a
	// failure: the node's is not tried again before its wait ends, the
	// pods' at the next change too (one pod that fails holds up none of
	// the others).
	var nodeWait, podWait time.Duration
	var nodeRetry, podRetry <-chan time.Time
	for {
		resync := false
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-nodeRetry:
			nodeRetry = nil
		case <-podRetry:
			podRetry = nil
			s.qmu.Lock()
			s.q.pods = true
			s.qmu.Unlock()
		case <-tick:
			resync = true
			s.qmu.Lock()
			s.q.requeue()
			s.q.resyncPods()
			s.qmu.Unlock()
		}
		if nodeRetry == nil {
			if err := s.sync(resync); err != nil {
				nodeWait = min(max(2*nodeWait, retryMin), retryMax)
				log.Error("network policy: the transaction failed; a full sync follows", "err", err, "retry in", nodeWait)
				nodeRetry = time.After(nodeWait)
			} else {
				nodeWait = 0
			}
		}
		if err := s.syncPods(log); err != nil {
			podWait = min(max(2*podWait, retryMin), retryMax)
			log.Error("multi-network policy: pod tables not written; tried again", "err", err, "retry in", podWait)
			if podRetry == nil {
				podRetry = time.After(podWait)
			}
		} else if !s.podsPending() {
			podWait, podRetry = 0, nil
		}
	}
}

// podsPending reports whether a pod table is left to write.
func (s *Syncer) podsPending() bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.q.pods
}

// wake makes Run look at the queue.
func (s *Syncer) wake() {
	select {
	case s.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Wait blocks until every change Apply queued before the call is
// committed, or ctx ends (tests, benchmarks).
func (s *Syncer) Wait(ctx context.Context) error {
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

// batch is one transaction and what the Syncer notes when it is committed.
type batch struct {
	c      *nft.PolicyChange
	n      uint64 // the last change it holds
	live   []netip.Addr
	rules  *policymodel.Rules // nil: the rules did not change
	node   string
	sets   int
	resync bool
}

// sync takes the queue of the node's table and commits it (if anything
// is queued and its model is here), then, if that fails and it was not a
// full sync already, a full sync at once. A failure leaves a full sync
// queued.
func (s *Syncer) sync(resync bool) error {
	b := s.take(resync)
	if b == nil {
		return nil
	}
	err := s.commit(b)
	if err != nil && !b.c.Full {
		// The table and the model parted (an element the kernel did not
		// have, say, or the table gone under it): a full sync puts it right.
		s.requeue()
		if b = s.take(false); b != nil {
			err = s.commit(b)
		}
	}
	if err != nil {
		s.requeue()
	}
	return err
}

func (s *Syncer) requeue() {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	s.q.requeue()
}

// take makes the batch of what is queued (nil: nothing is queued, or its
// model is being changed: the Apply or Offer that follows wakes Run). It
// never takes the watcher's lock. A full sync keeps the model handed over
// (claimLocked: it never changes from then on) and is made of it after
// the queue's lock; a delta's change borrows the model for as long as it
// copies what it holds of it (detach: the delta's sets), and the
// watcher's Withdraw waits for that, so that a model is handed out (and
// copied on the engine's next change) only for a full sync, as when the
// change was made under the watcher's lock. Before Run (Apply committing
// at once) the model is the caller's, valid during its call, and is used
// as it is.
func (s *Syncer) take(resync bool) *batch {
	s.qmu.Lock()
	if !s.q.dirty {
		s.qmu.Unlock()
		return nil
	}
	full := s.q.full || !s.synced.Load()
	m, borrowed := s.offered, false
	switch {
	case !s.async:
	case full:
		m = s.claimLocked()
	case m != nil:
		s.borrowed, borrowed = true, true
	case s.claimed:
		m = s.kept // nothing offered since it was kept: it is the model
	}
	if m == nil {
		s.qmu.Unlock()
		return nil
	}
	d, _, n := s.q.take()
	s.qmu.Unlock()
	b := &batch{n: n, live: localAddrs(m), node: m.Node, sets: len(m.Sets), resync: resync && full}
	b.c = Change(m, d, full)
	if borrowed {
		detach(b.c)
		s.qmu.Lock()
		s.borrowed = false
		s.returned.Broadcast()
		s.qmu.Unlock()
	}
	if b.c.Rules != nil {
		b.rules = b.c.Rules
	}
	return b
}

// detach copies what c holds of a borrowed model (its rules and sets), so
// that it stays valid once the model is given back. The rules' policies
// are not copied: a compiled policy is never changed, only replaced.
func detach(c *nft.PolicyChange) {
	if c.Rules != nil {
		r := *c.Rules
		c.Rules = &r
	}
	for i, set := range c.Sets {
		c.Sets[i] = policymodel.NewSet(set.ID, set.Kind, set.Key, set.Elems()...)
	}
}

// commit commits b, then notes it: the stats and the metrics' rules under
// the Syncer's lock, the store's index after it.
func (s *Syncer) commit(b *batch) error {
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	s.mu.Lock()
	b.c.Resolved, b.c.ToPending = b.live, closed(s.live, b.live)
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
