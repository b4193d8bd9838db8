package policynft

import "github.com/cnibox/cnibox/netops/nft"

// SetBeforeCommit makes s run f before each transaction (outside every
// lock).
func SetBeforeCommit(s *Syncer, f func()) { s.beforeCommit = f }

// Running reports whether s's Run is committing (Apply only queues).
func Running(s *Syncer) bool {
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

// SetPodOpener makes s open a pod's namespace with open (a test's fake
// kernels, by path).
func SetPodOpener(s *Syncer, open func(path string) (*nft.Handle, error)) {
	s.pods.pmu.Lock()
	defer s.pods.pmu.Unlock()
	s.pods.open = open
}
