package main

import (
	"os"
	"runtime/debug"
)

// agentGCPercent: the agent's live heap is about 1 MB, so the Go runtime's
// floor of a 4 MB heap goal (at GOGC=100) is most of its anonymous memory.
// Half of it keeps the resident set ~1.5 MB lower for a few more
// collections of a 1 MB heap (well under a millisecond each). $GOGC still
// wins.
const agentGCPercent = 50

func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(agentGCPercent)
	}
}
