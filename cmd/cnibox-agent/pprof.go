//go:build cniboxprof

package main

import (
	"net/http"
	_ "net/http/pprof" // the profiles, on $CNIBOX_AGENT_PPROF only
	"os"
)

// With -tags cniboxprof (never in a release build), $CNIBOX_AGENT_PPROF=addr
// serves net/http/pprof there, for the heap profiles of docs/benchmarks.md:
// go tool pprof -sample_index=inuse_space http://addr/debug/pprof/heap.
func init() {
	if addr := os.Getenv("CNIBOX_AGENT_PPROF"); addr != "" {
		go http.ListenAndServe(addr, nil) //nolint:errcheck // a debugging aid
	}
}
