package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
	"github.com/cnibox/cnibox/store"
)

// A node's slice pool (node_slice_size) is this node's alone: the agent
// keeps it in memory, allocates there (an ADD costs a socket round trip and
// a map lookup, as a host-local ADD costs a store transaction) and writes
// it behind, coalescing the changes of a burst into one update. A write
// that meets another writer's change (the reclaiming agent, whereabouts
// on the same node) merges: this agent's changes since the version it
// last wrote, replayed on the pool as it is now. With a data directory, a
// change is in the node's store (a journal, store.SliceJournal) before the
// ADD answers and until the IPPool holds it, so an agent restarted in
// between writes it then (Recover) instead of losing it.
type localPool struct {
	mu      sync.Mutex
	base    *Pool // the pool as last read or written
	ours    *Pool // base with this agent's changes
	gen     uint64
	written uint64 // the generation base holds
	kick    chan struct{}
	journal map[string]store.SliceChange // changes base does not hold yet, by offset
}

// localFor returns the in-memory pool of a slice target, reading it (or
// creating it) the first time and starting its writer.
func (al *Allocator) localFor(ctx context.Context, t target) (*localPool, error) {
	al.mu.Lock()
	lp := al.local[t.pool]
	al.mu.Unlock()
	if lp != nil {
		return lp, nil
	}
	p, err := al.pool(ctx, t, true)
	if err != nil {
		return nil, err
	}
	al.mu.Lock()
	defer al.mu.Unlock()
	if al.local == nil {
		al.local = map[string]*localPool{}
	}
	if lp = al.local[t.pool]; lp == nil {
		lp = &localPool{base: p, ours: p.clone(), kick: make(chan struct{}, 1), journal: map[string]store.SliceChange{}}
		if err := al.recoverJournal(lp); err != nil {
			return nil, err
		}
		al.local[t.pool] = lp
		go al.writeBehind(lp)
	}
	return lp, nil
}

// reserveLocal is reserve for a slice target, in memory. In a slice of
// the agent's default, the addresses the range's plain pool holds (pods of
// before the default) are taken, and an attachment that holds one keeps
// it, in the plain pool.
func (al *Allocator) reserveLocal(ctx context.Context, t target, req *agentapi.IPAMRequest, asked netip.Addr) (netip.Addr, error) {
	var held map[netip.Addr]wbpool.Allocation
	if t.plain != nil {
		mine, same, h, err := al.plainHeld(ctx, t, req)
		if err != nil {
			return netip.Addr{}, err
		}
		switch {
		case same: // the ADD again
			return mine, nil
		case mine.IsValid(): // the pod's new container: written there, as whereabouts
			return al.reserve(ctx, *t.plain, req, mine)
		}
		held = h
	}
	lp, err := al.localFor(ctx, t)
	if err != nil {
		return netip.Addr{}, err
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	base, _, err := wbpool.ParsePoolRange(lp.ours.Range)
	if err != nil {
		return netip.Addr{}, err
	}
	taken := make(map[netip.Addr]wbpool.Allocation, len(held)+len(lp.ours.Allocations))
	for ip, a := range held {
		taken[ip] = a
	}
	for off, a := range lp.ours.Allocations {
		if ip, ok := wbpool.AddrAt(base, off); ok {
			taken[ip] = a
		}
	}
	ip, _, err := choose(t, lp.ours, base, taken, nil, req, asked)
	if err != nil {
		return netip.Addr{}, err
	}
	off, _ := wbpool.Offset(base, ip)
	a := wbpool.Allocation{ContainerID: req.ContainerID, PodRef: req.PodRef, IfName: req.IfName}
	if err := al.record(lp, map[string]store.SliceChange{off: {ContainerID: a.ContainerID, PodRef: a.PodRef, IfName: a.IfName}}); err != nil {
		return netip.Addr{}, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("IPPool %s: keep the reservation in the node's store: %v", t.pool, err)}
	}
	lp.ours.Allocations[off] = a
	delete(lp.ours.Sticky, off)
	lp.changed()
	return ip, nil
}

// releaseLocal is release for a slice target, in memory.
func (al *Allocator) releaseLocal(ctx context.Context, t target, req *agentapi.IPAMRequest) error {
	lp, err := al.localFor(ctx, t)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	lp.mu.Lock()
	off, ok := find(lp.ours, req)
	if !ok {
		lp.mu.Unlock()
		return al.releasePlain(ctx, t, req)
	}
	defer lp.mu.Unlock()
	a := lp.ours.Allocations[off]
	if err := al.record(lp, map[string]store.SliceChange{off: {ContainerID: a.ContainerID, PodRef: a.PodRef, IfName: a.IfName, Released: true}}); err != nil {
		// DEL succeeds: the IPPool write is on its way; only a restart
		// before it would forget the release.
		al.logger().Warn("cluster IPAM: a release is not in the node's store", "pool", t.pool, "err", err)
	}
	delete(lp.ours.Allocations, off)
	if req.Sticky && a.PodRef != "" {
		remember(lp.ours, off, a.PodRef+"/"+a.IfName)
	}
	lp.changed()
	return nil
}

// poolCache is a backend that reads pools from a cache alone (Kube: its
// informer and its own last writes).
type poolCache interface {
	// CachedPool returns the pool as cached (nil: there is none); false
	// when the cache cannot tell yet.
	CachedPool(name string) (*Pool, bool)
}

// cachedPool reads a pool from the backend's cache where it has one, else
// from the backend; nil when there is none.
func (al *Allocator) cachedPool(ctx context.Context, name string) (*Pool, error) {
	if c, ok := al.B.(poolCache); ok {
		if p, known := c.CachedPool(name); known {
			return p, nil
		}
	}
	p, err := al.B.GetPool(ctx, name, false)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return p, err
}

// plainHeld reads the plain pool of t, a slice of the agent's default
// (from the cache), for an ADD: the address the attachment (same), or its
// pod on the same interface, holds there (mine), else the addresses of
// the slice it holds.
func (al *Allocator) plainHeld(ctx context.Context, t target, req *agentapi.IPAMRequest) (mine netip.Addr, same bool, held map[netip.Addr]wbpool.Allocation, err error) {
	p, err := al.cachedPool(ctx, t.plain.pool)
	if err != nil {
		return netip.Addr{}, false, nil, apiErr(err, "read IPPool %s", t.plain.pool)
	}
	if p == nil || len(p.Allocations) == 0 {
		return netip.Addr{}, false, nil, nil
	}
	base, _, err := wbpool.ParsePoolRange(p.Range)
	if err != nil {
		return netip.Addr{}, false, nil, apiErr(err, "IPPool %s", p.Name)
	}
	held = map[netip.Addr]wbpool.Allocation{}
	for off, a := range p.Allocations {
		ip, ok := wbpool.AddrAt(base, off)
		if !ok {
			continue
		}
		if a.ContainerID == req.ContainerID && a.IfName == req.IfName {
			return ip, true, nil, nil
		}
		if req.PodRef != "" && a.PodRef == req.PodRef && a.IfName == req.IfName {
			mine = ip
		}
		if t.r.Prefix.Contains(ip) {
			held[ip] = a
		}
	}
	if mine.IsValid() {
		return mine, false, nil, nil
	}
	return netip.Addr{}, false, held, nil
}

// releasePlain releases the attachment from the plain pool of t, a slice
// of the agent's default, when the pool holds it (an address of before
// the default); otherwise there is nothing to release.
func (al *Allocator) releasePlain(ctx context.Context, t target, req *agentapi.IPAMRequest) error {
	if t.plain == nil {
		return nil
	}
	p, err := al.cachedPool(ctx, t.plain.pool)
	if err != nil {
		return apiErr(err, "read IPPool %s", t.plain.pool)
	}
	if p == nil {
		return nil
	}
	if _, ok := find(p, req); !ok {
		return nil
	}
	return al.release(ctx, *t.plain, req)
}

// changed notes a change (lp.mu held) and wakes the writer.
func (lp *localPool) changed() {
	lp.gen++
	select {
	case lp.kick <- struct{}{}:
	default:
	}
}

// writeBehind writes lp whenever it changed, until the agent stops; a
// failed write is retried after a second.
func (al *Allocator) writeBehind(lp *localPool) {
	log := al.logger()
	for range lp.kick {
		for {
			err := al.flush(lp)
			if err == nil {
				break
			}
			log.Warn("cluster IPAM: writing a node slice's pool failed; retrying", "pool", lp.base.Name, "err", err)
			time.Sleep(time.Second)
		}
	}
}

// flush writes what changed since the last write (nothing: no call).
func (al *Allocator) flush(lp *localPool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for attempt := 0; attempt < maxAttempts; attempt++ {
		lp.mu.Lock()
		if lp.gen == lp.written {
			lp.mu.Unlock()
			return nil
		}
		snap, gen := lp.ours.clone(), lp.gen
		snap.Version = lp.base.Version
		lp.mu.Unlock()
		wrote, err := al.B.UpdatePool(ctx, snap)
		if err == nil {
			lp.mu.Lock()
			wrote.Allocations, wrote.Sticky = snap.Allocations, snap.Sticky
			lp.base, lp.written = wrote, gen
			al.written(lp, gen)
			lp.mu.Unlock()
			continue // more may have changed meanwhile
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
		theirs, err := al.B.GetPool(ctx, snap.Name, true)
		if err != nil {
			return err
		}
		lp.mu.Lock()
		merged := replay(lp.base, lp.ours, theirs)
		lp.base, lp.ours = theirs, merged
		lp.mu.Unlock()
	}
	return errors.New("still changed by other writers")
}

// replay applies ours' changes since base onto theirs.
func replay(base, ours, theirs *Pool) *Pool {
	out := theirs.clone()
	for off, a := range ours.Allocations {
		if b, ok := base.Allocations[off]; !ok || b != a {
			out.Allocations[off] = a
		}
	}
	for off := range base.Allocations {
		if _, ok := ours.Allocations[off]; !ok {
			delete(out.Allocations, off)
		}
	}
	for off, who := range ours.Sticky {
		out.Sticky[off] = who
	}
	return out
}

// GC releases, in this node's slice pools, every allocation whose
// attachment is not in req.Keep, and returns the addresses it released.
// A range without node slices is left to the reclaim by pod: its pool does
// not say which node an allocation is of.
func (al *Allocator) GC(ctx context.Context, req *agentapi.IPAMRequest) ([]string, error) {
	ts, err := al.targets(ctx, req, agentapi.OpIPAMGC)
	if err != nil {
		return nil, err
	}
	keep := map[agentapi.IPAMAttachment]bool{}
	for _, k := range req.Keep {
		keep[k] = true
	}
	var freed []string
	for _, t := range ts {
		if !t.local {
			continue
		}
		lp, err := al.localFor(ctx, t)
		if err != nil {
			return nil, err
		}
		lp.mu.Lock()
		base, _, _ := wbpool.ParsePoolRange(lp.ours.Range)
		gone := map[string]store.SliceChange{}
		for off, a := range lp.ours.Allocations {
			if !keep[agentapi.IPAMAttachment{ContainerID: a.ContainerID, IfName: a.IfName}] {
				gone[off] = store.SliceChange{ContainerID: a.ContainerID, PodRef: a.PodRef, IfName: a.IfName, Released: true}
			}
		}
		if err := al.record(lp, gone); err != nil {
			al.logger().Warn("cluster IPAM: GC's releases are not in the node's store", "pool", t.pool, "err", err)
		}
		for off := range gone {
			delete(lp.ours.Allocations, off)
			if ip, ok := wbpool.AddrAt(base, off); ok {
				freed = append(freed, ip.String())
			}
		}
		if len(gone) > 0 {
			lp.changed()
		}
		lp.mu.Unlock()
	}
	return freed, nil
}
