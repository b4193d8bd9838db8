// Package nstest creates throwaway network namespaces for tests that need a
// real kernel. It is imported only by _test.go files.
//
// Tests using it must run as root; RequireRoot skips them otherwise.
package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops/internal/nsdir"
	"github.com/cnibox/cnibox/netops/internal/nsthread"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequireRoot skips the test unless it runs as root (and not under make
// check's CNIBOX_TEST_UNPRIVILEGED=1: internal/testenv).
func RequireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "create network namespaces")
}

// NewNS creates a fresh named network namespace (bind-mounted at
// /run/netns/<prefix>-<random>), brings its loopback up, sets the sysctls
// of baseSysctls (forwarding off, whatever the machine's), and registers a
// t.Cleanup that deletes it. It returns the namespace's path. It skips the
// test when not run as root.
func NewNS(t testing.TB, prefix string) string {
	t.Helper()
	RequireRoot(t)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random namespace name: %v", err)
	}
	name := fmt.Sprintf("%s-%s", prefix, hex.EncodeToString(b[:]))
	if len(name) > 64 {
		t.Fatalf("namespace name %q too long", name)
	}
	if err := create(name); err != nil {
		t.Fatalf("create network namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete network namespace %s: %v", name, err)
		}
	})
	return filepath.Join("/run/netns", name)
}

// create makes the named namespace and settles it (loopback up, the
// sysctls of baseSysctls), on a thread
// that nsthread.Do moves into the new namespace (netns.NewNamed does) and
// back.
func create(name string) error {
	if err := nsdir.Ensure("/run/netns"); err != nil {
		return err
	}
	created := false
	err := nsthread.Do(func() error {
		ns, err := netns.NewNamed(name)
		if err != nil {
			return err
		}
		created = true
		ns.Close()
		return nil
	}, settle)
	if err != nil && created {
		_ = netns.DeleteNamed(name)
	}
	return err
}

// loUp sets lo up in the namespace of the calling thread.
func loUp() error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// Run runs fn on a locked OS thread inside the namespace at nsPath and
// returns its error. Sockets fn opens stay in that namespace and can be used
// from any goroutine afterwards. The thread is never returned to the
// runtime: the goroutine that ran fn exits with it locked.
func Run(t testing.TB, nsPath string, fn func() error) error {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatalf("open network namespace %s: %v", nsPath, err)
	}
	defer ns.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread dies with this goroutine.
		if err := netns.Set(ns); err != nil {
			done <- fmt.Errorf("enter network namespace %s: %w", nsPath, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// privateEnv marks the re-executed test process that already runs in its own
// network namespace.
const privateEnv = "CNIBOX_TEST_PRIVATE_NETNS"

// MainInPrivateNetns is a TestMain for packages whose tests act on "the
// node": it re-executes the test binary in a fresh network namespace (its
// loopback up, forwarding off: baseSysctls) that stands for the node, so bridges, routes, nftables tables
// and sysctls the tests create never touch the machine's own. Every process
// the tests start (plugins, podman) inherits that namespace. Without root the
// tests run as they are (and the kernel ones skip). m is a *testing.M, or a
// wrapper whose Run cleans up after the tests.
func MainInPrivateNetns(m interface{ Run() int }) {
	if os.Getenv(privateEnv) == "1" || os.Geteuid() != 0 {
		if os.Geteuid() == 0 {
			if err := settle(); err != nil {
				fmt.Fprintln(os.Stderr, "nstest: settle the private namespace:", err)
				os.Exit(1)
			}
		}
		os.Exit(m.Run())
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), privateEnv+"=1")
	// The node's store and log default to /var/lib/cnibox and /var/log/cnibox:
	// a test that forgets to point a plugin elsewhere must not write there.
	scratch, err := os.MkdirTemp("", "cnibox-node-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nstest:", err)
		os.Exit(1)
	}
	for k, v := range map[string]string{"CNIBOX_DATA_DIR": filepath.Join(scratch, "data"), "CNIBOX_LOG_FILE": filepath.Join(scratch, "cnibox.log")} {
		if os.Getenv(k) == "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	err = cmd.Run()
	os.RemoveAll(scratch)
	var ee *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &ee):
		os.Exit(ee.ExitCode())
	default:
		fmt.Fprintln(os.Stderr, "nstest: re-exec in a private network namespace:", err)
		os.Exit(1)
	}
}

// InPrivateNetns reports whether this process is the re-executed test binary
// that MainInPrivateNetns started in a namespace of its own: a test that
// would act on the whole namespace (flush its nftables ruleset) checks it.
func InPrivateNetns() bool { return os.Getenv(privateEnv) == "1" }
