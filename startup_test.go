package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoInitCode: no package of cnibox's own runs code when the binary
// starts. Every CNI call is a fresh process that runs every linked package's
// init, so a role's package-level value built by a call (a Role made by a
// constructor or a generic adapter, a map, a regexp, sync.OnceValue, a
// netip.Addr) costs every call of every role its page faults
// (docs/benchmarks.md, issue 30). The Go runtime lists the inits it runs
// with GODEBUG=inittrace=1; this re-runs the test binary, which links the
// same packages as cnibox, and reads that list. main's own init (the heap
// profile rate) is the one allowed.
func TestNoInitCode(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation gives every package an init")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	const own = "github.com/cnibox/cnibox"
	var seen int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "init" {
			continue
		}
		seen++
		if pkg := f[1]; strings.HasPrefix(pkg, own+"/") {
			t.Errorf("package %s runs code at start-up (%s): make its package-level values plain data (see cniplug.Role)", pkg, strings.Join(f[2:], " "))
		}
	}
	if seen == 0 {
		t.Fatalf("no inittrace lines: GODEBUG=inittrace=1 printed nothing\n%s", out)
	}
}
