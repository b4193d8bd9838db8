package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// pick is one attachment's place in a batch of reservations of one pool.
type pick struct {
	req       *agentapi.IPAMRequest
	asked     netip.Addr
	elsewhere map[netip.Addr]bool
	done      chan struct{}
	// the outcome
	ip       netip.Addr
	off      string
	alloc    wbpool.Allocation
	existing bool
	err      error
}

// batch is the queue of a pool's reservations on this node: the first
// caller writes for every caller waiting meanwhile, in one update (group
// commit), so a burst of ADDs on a node costs the pool one write, not one
// each, and meets other writers' far less.
type batch struct {
	pending []*pick
	running bool
}

// commit reserves pk's address in the target's pool, together with the
// other reservations waiting for that pool.
func (al *Allocator) commit(ctx context.Context, t target, pk *pick) (*pick, error) {
	pk.done = make(chan struct{})
	al.mu.Lock()
	if al.batches == nil {
		al.batches = map[string]*batch{}
	}
	b := al.batches[t.pool]
	if b == nil {
		b = &batch{}
		al.batches[t.pool] = b
	}
	b.pending = append(b.pending, pk)
	lead := !b.running
	b.running = true
	al.mu.Unlock()
	if lead {
		go al.writeBatches(t, b)
	}
	select {
	case <-pk.done:
		return pk, pk.err
	case <-ctx.Done():
		return nil, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("IPPool %s: %v", t.pool, ctx.Err())}
	}
}

// writeBatches writes the pool's waiting reservations, a batch at a time,
// until none wait.
func (al *Allocator) writeBatches(t target, b *batch) {
	for {
		al.mu.Lock()
		picks := b.pending
		b.pending = nil
		if len(picks) == 0 {
			b.running = false
			al.mu.Unlock()
			return
		}
		al.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		al.writeBatch(ctx, t, picks)
		cancel()
		for _, pk := range picks {
			close(pk.done)
		}
	}
}

// writeBatch chooses every pick's address on the pool as read and writes
// them in one update, reading again on a conflict.
func (al *Allocator) writeBatch(ctx context.Context, t target, picks []*pick) {
	defer al.lock(t.pool)()
	fail := func(err error) {
		for _, pk := range picks {
			if pk.err == nil {
				pk.err = err
			}
		}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		p, err := al.pool(ctx, t, attempt > 0)
		if err != nil {
			fail(err)
			return
		}
		base, _, err := wbpool.ParsePoolRange(p.Range)
		if err != nil {
			fail(&agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("IPPool %s: %v", t.pool, err)})
			return
		}
		taken := map[netip.Addr]wbpool.Allocation{}
		for off, a := range p.Allocations {
			if ip, ok := wbpool.AddrAt(base, off); ok {
				taken[ip] = a
			}
		}
		np, changed := p.clone(), false
		for _, pk := range picks {
			pk.err = nil
			ip, existing, err := choose(t, np, base, taken, pk.elsewhere, pk.req, pk.asked)
			if err != nil {
				pk.err = err
				continue
			}
			off, _ := wbpool.Offset(base, ip)
			next := wbpool.Allocation{ContainerID: pk.req.ContainerID, PodRef: pk.req.PodRef, IfName: pk.req.IfName}
			pk.ip, pk.off, pk.alloc, pk.existing = ip, off, next, existing
			if cur, had := np.Allocations[off]; !had || cur != next {
				np.Allocations[off] = next
				delete(np.Sticky, off)
				changed = true
			}
			taken[ip] = next
		}
		if !changed {
			return
		}
		_, err = al.B.UpdatePool(ctx, np)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrConflict) {
			fail(apiErr(err, "write IPPool %s", t.pool))
			return
		}
	}
	fail(&agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("IPPool %s: still changed by other writers after %d attempts", t.pool, maxAttempts)})
}
