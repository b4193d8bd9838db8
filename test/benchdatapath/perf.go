package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// perfRecord starts a system-wide profile (perf record -a -g, every CPU:
// a packet's softirq work runs on whichever CPU took it) into -perf's
// directory, named by the instance, the pair and the run, for a TCP_CRR
// run; the returned stop ends it (SIGINT, as perf wants, then waits). With
// no -perf it is a no-op. perf runs in the harness's own namespaces: it
// sees every namespace's packets, as the kernel's functions are shared.
// Read two with perf report --no-children --sort sym -i FILE, or perf
// diff A B.
func (in *instance) perfRecord(p pair, run int) (stop func() error, err error) {
	if in.e.o.perf == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(in.e.o.perf, 0o755); err != nil {
		return nil, err
	}
	kind := strings.NewReplacer(", ", "-", " ", "-").Replace(p.kind)
	file := filepath.Join(in.e.o.perf, fmt.Sprintf("%d-%s-%s-run%d.data", in.seq, in.c.name, kind, run))
	cmd := exec.Command("perf", "record", "-a", "-g", "-F", "999", "-q", "-o", file)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record (-perf): %w", err)
	}
	return func() error {
		_ = cmd.Process.Signal(syscall.SIGINT)
		// (perf writes its file and ends by SIGINT again: an ending by
		// that signal is its success)
		var ee *exec.ExitError
		if err := cmd.Wait(); err != nil && !(errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT) {
			return fmt.Errorf("perf record %s: %w", file, err)
		}
		in.logf("perf profile of TCP_CRR in %s", file)
		return nil
	}, nil
}
