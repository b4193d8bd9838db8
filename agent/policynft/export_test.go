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
