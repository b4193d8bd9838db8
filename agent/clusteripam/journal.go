package clusteripam

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cnibox/cnibox/internal/wbpool"
	"github.com/cnibox/cnibox/store"
)

// The journal of node slices (store.SliceJournal): what a slice's pool
// changed in memory and the IPPool does not hold yet, in the node's store.

func (al *Allocator) logger() *slog.Logger {
	if al.Log == nil {
		return slog.Default()
	}
	return al.Log
}

// record adds changes to lp's journal, as the next generation, and keeps
// the journal in the store (lp.mu held). On failure the journal is as it
// was.
func (al *Allocator) record(lp *localPool, changes map[string]store.SliceChange) error {
	if len(changes) == 0 {
		return nil
	}
	prev := make(map[string]store.SliceChange, len(changes))
	had := map[string]bool{}
	for off, c := range changes {
		prev[off], had[off] = lp.journal[off]
		c.Gen = lp.gen + 1
		lp.journal[off] = c
	}
	if err := al.persist(lp); err != nil {
		for off := range changes {
			if had[off] {
				lp.journal[off] = prev[off]
			} else {
				delete(lp.journal, off)
			}
		}
		return err
	}
	return nil
}

// written drops what the IPPool holds now (generation gen) from lp's
// journal (lp.mu held).
func (al *Allocator) written(lp *localPool, gen uint64) {
	n := len(lp.journal)
	for off, c := range lp.journal {
		if c.Gen <= gen {
			delete(lp.journal, off)
		}
	}
	if len(lp.journal) == n {
		return
	}
	if err := al.persist(lp); err != nil {
		// A restart would write these again: they are in the IPPool
		// already, so that changes nothing.
		al.logger().Warn("cluster IPAM: clearing the slice journal in the node's store", "pool", lp.base.Name, "err", err)
	}
}

// persist writes lp's journal into the store (no data directory: none).
func (al *Allocator) persist(lp *localPool) error {
	if al.DataDir == "" {
		return nil
	}
	st, err := store.Open(al.DataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.PutSliceJournal(store.SliceJournal{Pool: lp.base.Name, Range: lp.base.Range, Changes: lp.journal})
}

// recoverJournal applies the journal a previous run left for lp's pool to
// the pool as read, and wakes the writer (before lp is in use).
func (al *Allocator) recoverJournal(lp *localPool) error {
	if al.DataDir == "" {
		return nil
	}
	st, err := store.Open(al.DataDir)
	if err != nil {
		return fmt.Errorf("IPPool %s: read the slice journal: %w", lp.base.Name, err)
	}
	j, found, err := st.GetSliceJournal(lp.base.Name)
	st.Close()
	if err != nil || !found {
		return err
	}
	for off, c := range j.Changes {
		cur, held := lp.ours.Allocations[off]
		switch {
		case c.Released:
			if held && cur.ContainerID == c.ContainerID && cur.IfName == c.IfName {
				delete(lp.ours.Allocations, off)
			}
		case held && (cur.ContainerID != c.ContainerID || cur.IfName != c.IfName):
			// Another writer gave the address away meanwhile (whereabouts
			// on this node): the pool's holder keeps it.
			al.logger().Error("cluster IPAM: an address this agent handed out before it restarted is held by another attachment now", "pool", lp.base.Name, "offset", off, "ours", c.ContainerID, "theirs", cur.ContainerID)
			continue
		default:
			lp.ours.Allocations[off] = wbpool.Allocation{ContainerID: c.ContainerID, PodRef: c.PodRef, IfName: c.IfName}
		}
		c.Gen = 1
		lp.journal[off] = c
	}
	if len(lp.journal) > 0 {
		lp.gen = 1
		lp.kick <- struct{}{}
		al.logger().Info("cluster IPAM: writing the slice changes of before the restart", "pool", lp.base.Name, "changes", len(lp.journal))
	}
	return nil
}

// Recover writes, at the agent's start, the node slices' changes a
// previous run made and did not write, retrying every few seconds until
// each is written or ctx ends.
func (al *Allocator) Recover(ctx context.Context) {
	if al.DataDir == "" {
		return
	}
	for {
		st, err := store.Open(al.DataDir)
		var js []store.SliceJournal
		if err == nil {
			js, err = st.SliceJournals()
			st.Close()
		}
		for _, j := range js {
			if _, lerr := al.localFor(ctx, target{pool: j.Pool, poolRange: j.Range, local: true}); lerr != nil && err == nil {
				err = lerr
			}
		}
		if err == nil {
			return
		}
		al.logger().Warn("cluster IPAM: recovering the slice journal", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}
