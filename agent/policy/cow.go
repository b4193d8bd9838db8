package policy

import (
	"maps"
	"sync/atomic"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// A model the engine hands out (Model) never changes: readers (the flow
// log's records and staged evaluation, Describe) take it under the
// watcher's lock, which costs a pointer, and the syncer and the DNS
// proxy's Permit and Learn are handed it (watch.go's Handoff); they read
// it without the lock as long as they like, so that a slow evaluation
// of a large policy delays no other namespace's change (issue 60, finding 5). The engine makes a new model
// at the first change after it handed one out: a copy of the model's
// struct, of its map of sets (its sets' pointers) and its local pods when
// they first change, and of each set when it first changes (Set.Clone: a
// part of a large set). A model that was only read under the lock
// (current) changes in place, as do those of the first lists; the one
// handed to the syncer (a Handoff, watch.go) is copied only when the
// syncer kept it (Withdraw says so before each change): once per
// transaction, not once per change. Each model
// has a Generation of its own, which a reader keys what it works out of
// the model on.

// generations numbers the models of every engine of the process: a
// Generation is one model's alone, also across a watch that starts again
// with a new engine.
var generations atomic.Uint64

// Model returns the model. It never changes: the engine's next change
// makes a new one.
func (e *Engine) Model() *policymodel.Model {
	e.published.Store(true)
	return e.m
}

// current is the model as it is now, to read under the lock of the
// engine's owner only: the engine's next change may change it.
func (e *Engine) current() *policymodel.Model { return e.m }

// writable makes e.m the engine's own to change: once handed out, it is
// copied first, and its map of sets and its local pods are copied when
// they first change (setForWrite, localForWrite), the sets as they
// change.
func (e *Engine) writable() {
	if !e.published.Load() {
		return
	}
	m := *e.m
	m.Generation = generations.Add(1)
	e.m, e.own = &m, map[policymodel.SetID]bool{}
	e.published.Store(false)
	e.setsShared, e.localShared = true, true
}

// setForWrite is set id of the model, the engine's own to change.
func (e *Engine) setForWrite(id policymodel.SetID) *policymodel.Set {
	e.writable()
	if e.setsShared {
		e.m.Sets, e.setsShared = maps.Clone(e.m.Sets), false
	}
	s := e.m.Sets[id]
	if !e.own[id] {
		s = s.Clone()
		e.m.Sets[id], e.own[id] = s, true
	}
	return s
}

// localForWrite makes the model's local pods (e.local) the engine's own
// to change.
func (e *Engine) localForWrite() {
	e.writable()
	if e.localShared {
		e.local, e.localShared = maps.Clone(e.local), false
		e.m.LocalPods = e.local
	}
}
