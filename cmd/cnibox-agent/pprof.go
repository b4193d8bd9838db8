//go:build cniboxprof

package main

import (
	"fmt"
	"net/http"
	_ "net/http/pprof" // the profiles, on $CNIBOX_AGENT_PPROF only
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
)

// With -tags cniboxprof (never in a release build), $CNIBOX_AGENT_PPROF=addr
// serves net/http/pprof there, for the heap profiles of docs/benchmarks.md:
// go tool pprof -sample_index=inuse_space http://addr/debug/pprof/heap.
// $CNIBOX_AGENT_PROFILE_DIR=dir writes dir/cpu-PID.pprof (the agent's whole
// life) and dir/heap-PID.pprof (at its end, after a GC), for agents a
// bench starts in namespaces where no address of theirs is reachable;
// with $CNIBOX_AGENT_TRACE set too, dir/trace-PID.out, the execution
// trace of its life (go tool trace -pprof=sched|sync|net|syscall: where
// its goroutines waited).
func init() {
	// $CNIBOX_AGENT_MEMPROFILERATE: the heap profile's sampling (1: every
	// allocation), set for the agent alone, not for the control plane
	// that GODEBUG would reach too.
	if r, err := strconv.Atoi(os.Getenv("CNIBOX_AGENT_MEMPROFILERATE")); err == nil && r > 0 {
		runtime.MemProfileRate = r
	}
	if addr := os.Getenv("CNIBOX_AGENT_PPROF"); addr != "" {
		go http.ListenAndServe(addr, nil) //nolint:errcheck // a debugging aid
	}
	dir := os.Getenv("CNIBOX_AGENT_PROFILE_DIR")
	if dir == "" {
		return
	}
	name := func(kind string) string { return filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", kind, os.Getpid())) }
	cpu, err := os.Create(name("cpu"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cnibox-agent: profile:", err)
		return
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		fmt.Fprintln(os.Stderr, "cnibox-agent: profile:", err)
		return
	}
	var tr *os.File
	if os.Getenv("CNIBOX_AGENT_TRACE") != "" {
		tr, err = os.Create(filepath.Join(dir, fmt.Sprintf("trace-%d.out", os.Getpid())))
		if err == nil {
			if err = trace.Start(tr); err != nil {
				tr.Close()
				tr = nil
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cnibox-agent: trace:", err)
		}
	}
	atExit = func() {
		if tr != nil {
			trace.Stop()
			tr.Close()
		}
		pprof.StopCPUProfile()
		cpu.Close()
		runtime.GC()
		if heap, err := os.Create(name("heap")); err == nil {
			_ = pprof.WriteHeapProfile(heap)
			heap.Close()
		}
	}
}
