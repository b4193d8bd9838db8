package policynft

import "github.com/cnibox/cnibox/internal/policymodel"

// queue is what the Sink was handed since its last transaction, merged
// (policymodel.Delta.Merge) so that one transaction takes it all.
type queue struct {
	dirty bool // something to commit (an empty delta too: a pod resolved)
	full  bool // the next transaction replaces the whole table
	d     policymodel.Delta
	// n counts the changes merged since the Sink began.
	n uint64
}

// merge adds d, the change that followed those already queued.
func (q *queue) merge(d policymodel.Delta) {
	q.n++
	q.dirty = true
	q.d.Merge(d)
}

// take returns the queue as one delta, whether it is a full sync and the
// number of the last change it holds, and empties it.
func (q *queue) take() (policymodel.Delta, bool, uint64) {
	d, full, n := q.d, q.full, q.n
	*q = queue{n: n}
	return d, full, n
}

// requeue marks the queue as needing a full sync: a transaction failed
// (what it carried is lost with it) or the periodic resync is due.
func (q *queue) requeue() {
	q.dirty, q.full = true, true
}
