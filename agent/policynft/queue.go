package policynft

import "github.com/cnibox/cnibox/internal/policymodel"

// queue is what the Syncer was handed since its last transaction, merged
// (policymodel.Delta.Merge) so that one transaction takes it all, and
// whether the pod tables changed since they were last written.
type queue struct {
	dirty bool // something to commit (an empty delta too: a pod resolved)
	full  bool // the next transaction replaces the whole table
	d     policymodel.Delta
	// n counts the changes merged since the Syncer began.
	n uint64
	// pods: the MultiNetworkPolicy input changed (PodTablesChanged), or a
	// pod table failed; podsAll: write every pod's table (the resync).
	pods, podsAll bool
}

// merge adds d, the change that followed those already queued.
func (q *queue) merge(d policymodel.Delta) {
	q.n++
	q.dirty = true
	q.d.Merge(d)
}

// take returns the queue of the node's table as one delta, whether it is
// a full sync and the number of the last change it holds, and empties it
// (the pods' part stays: takePods).
func (q *queue) take() (policymodel.Delta, bool, uint64) {
	d, full, n := q.d, q.full, q.n
	q.d, q.full, q.dirty = policymodel.Delta{}, false, false
	return d, full, n
}

// requeue marks the queue as needing a full sync: a transaction failed
// (what it carried is lost with it) or the periodic resync is due.
func (q *queue) requeue() {
	q.dirty, q.full = true, true
}

// resyncPods marks every pod's table to be written again.
func (q *queue) resyncPods() {
	q.pods, q.podsAll = true, true
}

// takePods reports whether the pod tables are to be synced, and whether
// every one is to be written, and empties that part.
func (q *queue) takePods() (sync, all bool) {
	sync, all = q.pods, q.podsAll
	q.pods, q.podsAll = false, false
	return sync, all
}
