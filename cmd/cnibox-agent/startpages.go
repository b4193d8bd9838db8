package main

import (
	"log/slog"
	"runtime/debug"

	"github.com/cnibox/cnibox/internal/startpages"
)

// releaseStartPages returns the garbage of the start: the heap's free pages
// and the binary's pages it touched (internal/startpages). Failing changes
// nothing but the RSS.
func releaseStartPages(log *slog.Logger) {
	debug.FreeOSMemory()
	n, err := startpages.Release()
	if err != nil {
		log.Debug("cannot return the start-up pages of the binary", "err", err)
		return
	}
	log.Debug("returned the start-up pages of the binary", "releasedBytes", n)
}
