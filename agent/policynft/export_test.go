package policynft

import "github.com/cnibox/cnibox/netops/nft"

// SetBeforeCommit makes s run f before each transaction (outside every
// lock).
func SetBeforeCommit(s *Sink, f func()) { s.beforeCommit = f }

// Running reports whether s's Run is committing (Apply only queues).
func Running(s *Sink) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.async
}

// SetPermitHook makes d's Permit run f before each evaluation.
func SetPermitHook(d *DNS, f func()) {
	d.permits.mu.Lock()
	defer d.permits.mu.Unlock()
	d.permits.beforeEval = f
}

// NewOn returns a Sink on h (a test's Handle on netops/nft/nftfake's
// kernel, say), as New does on a namespace's.
func NewOn(h *nft.Handle) *Sink {
	return &Sink{h: h, kick: make(chan struct{}, 1), doneCh: make(chan struct{})}
}
