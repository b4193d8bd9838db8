// A plugin process lives a few milliseconds: it never needs the runtime to
// re-check its CPU limit (updatemaxprocs), and naming its memory mappings
// for /proc/PID/maps (decoratemappings) is a system call per mapping.
//
//go:debug updatemaxprocs=0
//go:debug decoratemappings=0

// Command cnibox is every CNI plugin a node needs in one binary. Run through a
// symlink named after a plugin type (bridge, host-local, loopback, ...) it is
// that plugin; run as cnibox it is the operator's CLI, and `cnibox <role>` runs
// a role too (busybox style).
package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/cnibox/cnibox/cli"
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles"
)

// version is set at build time with -ldflags "-X main.version=..." (the
// Makefile gives git describe's); the release and the commit that
// --version prints beside it are internal/buildinfo's.
var version = "dev"

// Every CNI call is a fresh process that lives milliseconds: sampling its
// allocations for a heap profile nobody reads only costs stack unwinds (and
// the page faults of reading the unwind tables).
func init() { runtime.MemProfileRate = 0 }

func main() {
	stop := startProfile() // a no-op unless built with -tags cniboxprof
	code := run(os.Args)
	stop()
	os.Exit(code)
}

func run(argv []string) int {
	reg := roles.Registry()
	name := strings.TrimSuffix(filepath.Base(argv[0]), ".exe")
	role, ok := reg.Lookup(name)
	if !ok && len(argv) > 1 {
		if role, ok = reg.Lookup(argv[1]); ok {
			argv = argv[1:]
		}
	}
	if !ok && name != "cnibox" && os.Getenv("CNI_COMMAND") != "" {
		// Called by a runtime under a name that is no role of ours.
		return cniplug.MainUnknown(name, reg, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	}
	if ok && len(argv) > 1 {
		if sub := role.Command(argv[1]); sub != nil {
			return sub.Run(argv[2:])
		}
	}
	if ok {
		return cniplug.Main(context.Background(), role, cniplug.Invocation{
			Getenv:   os.Getenv,
			Stdin:    os.Stdin,
			Stderr:   os.Stderr,
			Registry: reg,
			Version:  version,
		}, os.Stdout)
	}
	return cli.Run(argv, cli.Options{Version: version, Registry: reg})
}
