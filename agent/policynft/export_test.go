package policynft

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
