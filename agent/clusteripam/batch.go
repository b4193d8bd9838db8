package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// op is one attachment's change of a pool, waiting in the pool's batch: a
// reservation (ADD) or a release (DEL, an undo, a reclaim).
type op struct {
	t         target
	release   bool
	req       *agentapi.IPAMRequest
	asked     netip.Addr
	elsewhere map[netip.Addr]bool
	queued    time.Time
	done      chan struct{}
	abandoned bool // its caller stopped waiting (al.mu)
	// the outcome
	ip       netip.Addr
	off      string
	alloc    wbpool.Allocation
	existing bool // a reservation the attachment held already
	found    bool // a release that removed an allocation
	err      error
}

// batch is the queue of a pool's changes on this node: one writer writes
// every change waiting meanwhile in one update (group commit), and folds
// in the ones that arrive while it retries after a conflict. A burst of
// ADDs and DELs on a node so costs the pool a few writes, not one each,
// and the more the pool is contended, the more each write carries.
type batch struct {
	pending []*op
	running bool
}

// commit queues o on its target's pool and waits for the write. A caller
// that stops waiting (ctx) leaves o behind: a reservation not written yet
// is dropped, one written meanwhile is released again, a release is
// written anyway.
func (al *Allocator) commit(ctx context.Context, o *op) (*op, error) {
	o.done, o.queued = make(chan struct{}), time.Now()
	al.mu.Lock()
	if al.batches == nil {
		al.batches = map[string]*batch{}
	}
	b := al.batches[o.t.pool]
	if b == nil {
		b = &batch{}
		al.batches[o.t.pool] = b
	}
	b.pending = append(b.pending, o)
	lead := !b.running
	b.running = true
	al.mu.Unlock()
	if lead {
		go al.writeBatches(o.t.pool, b)
	}
	select {
	case <-o.done:
		return o, o.err
	case <-ctx.Done():
		al.mu.Lock()
		o.abandoned = true
		al.mu.Unlock()
		return nil, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("IPPool %s: no write in time (%v): the pool is contended or the API server slow; the agent's log has the batch's timings", o.t.pool, ctx.Err())}
	}
}

// take empties b's queue (al.mu held), dropping abandoned reservations.
func (b *batch) take() []*op {
	var out []*op
	for _, o := range b.pending {
		if o.abandoned && !o.release {
			o.err = errors.New("abandoned")
			close(o.done)
			continue
		}
		out = append(out, o)
	}
	b.pending = nil
	return out
}

// writeBatches writes the pool's waiting changes, a batch at a time, until
// none wait.
func (al *Allocator) writeBatches(pool string, b *batch) {
	for {
		al.mu.Lock()
		ops := b.take()
		if len(ops) == 0 {
			b.running = false
			al.mu.Unlock()
			return
		}
		al.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		ops = al.writeBatch(ctx, pool, b, ops)
		cancel()
		al.mu.Lock()
		var undo []*op
		for _, o := range ops {
			if o.abandoned && !o.release && o.err == nil && !o.existing {
				undo = append(undo, &op{t: o.t, release: true, req: o.req, done: make(chan struct{}), queued: time.Now()})
			}
			close(o.done)
		}
		b.pending = append(b.pending, undo...) // nobody waits for these
		al.mu.Unlock()
	}
}

// batchStats is where a batch's time went, for the log.
type batchStats struct {
	attempts, conflicts  int
	read, write, backoff time.Duration
}

// writeBatch applies the ops to the pool as read and writes them in one
// update; after a conflict it reads the pool again and takes in the ops
// queued meanwhile. It returns every op it handled.
func (al *Allocator) writeBatch(ctx context.Context, pool string, b *batch, ops []*op) []*op {
	start := time.Now()
	var st batchStats
	defer func() { al.logBatch(pool, ops, start, st) }()
	fail := func(err error) {
		for _, o := range ops {
			if o.err == nil {
				o.err = err
			}
		}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			st.conflicts++
			if attempt > 1 {
				// Contended: leave the others a moment, and let this
				// node's changes gather into the write.
				d := rand.N(min(10*time.Millisecond<<attempt, 300*time.Millisecond))
				time.Sleep(d)
				st.backoff += d
			}
			al.mu.Lock()
			ops = append(ops, b.take()...)
			al.mu.Unlock()
		}
		st.attempts++
		t0 := time.Now()
		np, changed, err := al.readApply(ctx, pool, ops, attempt > 0)
		if err == nil && attempt == 0 && missedRelease(ops) {
			// The cache may not have seen a write whose outcome its
			// caller never learnt (an ADD that timed out and landed):
			// a release that finds nothing asks the API itself.
			np, changed, err = al.readApply(ctx, pool, ops, true)
		}
		st.read += time.Since(t0)
		if errors.Is(err, ErrNotFound) { // only releases, of a pool that is gone
			return ops
		}
		if err != nil {
			fail(err)
			return ops
		}
		if !changed {
			return ops
		}
		t0 = time.Now()
		_, err = al.B.UpdatePool(ctx, np)
		st.write += time.Since(t0)
		if err == nil {
			return ops
		}
		if !errors.Is(err, ErrConflict) {
			fail(apiErr(err, "write IPPool %s", pool))
			return ops
		}
	}
	fail(&agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("IPPool %s: still changed by other writers after %d attempts", pool, maxAttempts)})
	return ops
}

// readApply reads the pool (from the cache unless fresh) and applies the
// ops to a copy of it.
func (al *Allocator) readApply(ctx context.Context, pool string, ops []*op, fresh bool) (*Pool, bool, error) {
	p, err := al.batchPool(ctx, pool, ops, fresh)
	if err != nil {
		return nil, false, err
	}
	return apply(p, ops)
}

// missedRelease reports whether a release of ops found nothing to remove.
func missedRelease(ops []*op) bool {
	for _, o := range ops {
		if o.release && !o.found {
			return true
		}
	}
	return false
}

// batchPool reads the pool (from the cache unless fresh); a batch with a
// reservation creates it when missing.
func (al *Allocator) batchPool(ctx context.Context, pool string, ops []*op, fresh bool) (*Pool, error) {
	for _, o := range ops {
		if !o.release {
			return al.pool(ctx, o.t, fresh)
		}
	}
	p, err := al.B.GetPool(ctx, pool, fresh)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, apiErr(err, "read IPPool %s", pool)
	}
	return p, err
}

// apply makes the ops' changes, in their order, on a copy of p.
func apply(p *Pool, ops []*op) (*Pool, bool, error) {
	base, _, err := wbpool.ParsePoolRange(p.Range)
	if err != nil {
		return nil, false, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("IPPool %s: %v", p.Name, err)}
	}
	taken := map[netip.Addr]wbpool.Allocation{}
	for off, a := range p.Allocations {
		if ip, ok := wbpool.AddrAt(base, off); ok {
			taken[ip] = a
		}
	}
	np, changed := p.clone(), false
	for _, o := range ops {
		o.err, o.found = nil, false
		if o.release {
			off, ok := find(np, o.req)
			if !ok {
				continue
			}
			a := np.Allocations[off]
			delete(np.Allocations, off)
			if ip, ok := wbpool.AddrAt(base, off); ok {
				delete(taken, ip)
				o.ip = ip
			}
			if o.req.Sticky && a.PodRef != "" {
				remember(np, off, a.PodRef+"/"+a.IfName)
			}
			o.off, o.alloc, o.found, changed = off, a, true, true
			continue
		}
		ip, existing, err := choose(o.t, np, base, taken, o.elsewhere, o.req, o.asked)
		if err != nil {
			o.err = err
			continue
		}
		off, _ := wbpool.Offset(base, ip)
		next := wbpool.Allocation{ContainerID: o.req.ContainerID, PodRef: o.req.PodRef, IfName: o.req.IfName}
		o.ip, o.off, o.alloc, o.existing = ip, off, next, existing
		if cur, had := np.Allocations[off]; !had || cur != next {
			np.Allocations[off] = next
			delete(np.Sticky, off)
			changed = true
		}
		taken[ip] = next
	}
	return np, changed, nil
}

// logBatch logs where a batch's time went: at debug level, or as a warning
// when it took long enough for callers to notice.
func (al *Allocator) logBatch(pool string, ops []*op, start time.Time, st batchStats) {
	if al.Log == nil {
		return
	}
	var wait time.Duration
	adds, dels := 0, 0
	for _, o := range ops {
		wait = max(wait, start.Sub(o.queued))
		if o.release {
			dels++
		} else {
			adds++
		}
	}
	took := time.Since(start)
	log := al.Log.Debug
	if took > 5*time.Second || wait > 5*time.Second {
		log = al.Log.Warn
	}
	log("cluster IPAM: pool write", "pool", pool, "adds", adds, "dels", dels, "took", took.Round(time.Millisecond),
		"attempts", st.attempts, "conflicts", st.conflicts, "read", st.read.Round(time.Millisecond),
		"write", st.write.Round(time.Millisecond), "backoff", st.backoff.Round(time.Millisecond),
		"longest_wait", wait.Round(time.Millisecond))
}
