//go:build cniboxprof

package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
)

// startProfile writes a CPU profile of this process to
// $CNIBOX_CPUPROFILE.<pid> when that variable is set, sampling at
// $CNIBOX_CPUPROFILE_HZ (default 10000: a plugin call lasts milliseconds, the
// default 100 Hz would see nothing). Merge many calls' files with
// `go tool pprof -top bin/cnibox FILE.*`. Built only with -tags cniboxprof.
func startProfile() (stop func()) {
	path := os.Getenv("CNIBOX_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	hz := 10000
	if v, err := strconv.Atoi(os.Getenv("CNIBOX_CPUPROFILE_HZ")); err == nil && v > 0 {
		hz = v
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
	if err != nil {
		return func() {}
	}
	// StartCPUProfile keeps a rate set before it (and says so on stderr).
	runtime.SetCPUProfileRate(hz)
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
