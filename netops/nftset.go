package netops

import (
	"sync/atomic"

	"github.com/google/nftables"
)

// setIDs numbers the sets this process adds (from 1<<24 on: far above the
// numbers nftables would give, so the two never meet in one batch).
var setIDs atomic.Uint32

// addSet is nftables' Conn.AddSet with the set's batch ID given here: the
// library numbers sets from a package counter without a lock, a data race
// when Handles add sets from several goroutines (found by go test -race).
func addSet(c *nftables.Conn, s *nftables.Set, elems []nftables.SetElement) error {
	if s.ID == 0 {
		s.ID = 1<<24 + setIDs.Add(1)
	}
	return c.AddSet(s, elems)
}
