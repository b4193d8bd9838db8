// Package e2e drives the built cnibox binary the way container runtimes do:
// installed as symlinks in a temp dir and called through libcni, and by
// podman with its CNI backend. The whole test process runs in a private
// network namespace that stands for the node, so nothing touches the
// machine's own interfaces, routes, nftables or sysctls.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/internal/upstream"
)

// upstreamPlugins are the reference plugins of upstream.Version that the
// side-by-side tests need and Debian's package (1.1.1) lacks or has older.
var upstreamPlugins = []string{"bridge", "dummy", "tap"}

// cnitoolEnv carries the path of cnitool from TestMain to the tests, and
// prepErrEnv why something could not be prepared.
const (
	cnitoolEnv = "CNIBOX_E2E_CNITOOL"
	prepErrEnv = "CNIBOX_E2E_PREPARE_ERROR"
)

// TestMain builds what the tests need from outside (the reference plugins
// and cnitool, from the Go module proxy into the user's cache, once per
// version) while still in the machine's namespace, where the proxy can be
// reached, then re-runs the tests in a private network namespace that has
// no way out.
func TestMain(m *testing.M) {
	if !nstest.InPrivateNetns() && testenv.Root() {
		prepare()
	}
	nstest.MainInPrivateNetns(cleanup{m})
}

// cleanup runs the tests, then removes what they built (removeBuilt).
type cleanup struct{ m *testing.M }

func (c cleanup) Run() int {
	defer removeBuilt()
	// the node's namespace, before any test enters another (ownNetns)
	runtime.LockOSThread()
	nodeNetns, _ = os.Open("/proc/thread-self/ns/net")
	runtime.UnlockOSThread()
	return c.m.Run()
}

// nodeNetns is this process's namespace as TestMain found it (ownNetns).
var nodeNetns *os.File

// prepare sets upstream.DirEnv and cnitoolEnv for the re-executed tests, or
// prepErrEnv with what failed (each test that needs them fails with it). On
// a machine without a Go toolchain (the test-kernel guest) the guest's
// harness has set upstream.DirEnv, and cnitool is left out.
func prepare() {
	if _, err := exec.LookPath("go"); err != nil {
		return
	}
	var errs string
	dir, err := upstream.Plugins(upstreamPlugins...)
	if err != nil {
		errs += err.Error() + "\n"
	} else {
		os.Setenv(upstream.DirEnv, dir)
	}
	bin, err := upstream.Cnitool()
	if err != nil {
		errs += err.Error() + "\n"
	} else {
		os.Setenv(cnitoolEnv, bin)
	}
	if errs != "" {
		fmt.Fprint(os.Stderr, "e2e: prepare: ", errs)
		os.Setenv(prepErrEnv, errs)
	}
}

// prepared returns the value TestMain put in env. Without it the test fails
// with what went wrong, or skips where no Go toolchain could build it.
func prepared(t *testing.T, env string) string {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		return v
	}
	if msg := os.Getenv(prepErrEnv); msg != "" {
		t.Fatalf("TestMain could not prepare $%s: %s", env, msg)
	}
	t.Skipf("$%s is not set: no Go toolchain here to build it (TestMain)", env)
	return ""
}
