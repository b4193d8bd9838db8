// Package testenv says whether a test may use root's powers (network
// namespaces, nftables, mounts, daemons on privileged paths). It is imported
// only by tests and test helpers.
//
// A test that needs root asks Root or RequireRoot, never os.Geteuid itself,
// so that `make check` runs the same set of tests as a normal user and as
// root: it sets CNIBOX_TEST_UNPRIVILEGED=1, and then a root process is
// treated as a normal user's (the tests that need root or a kernel skip).
package testenv

import (
	"os"
	"testing"
)

// UnprivilegedEnv is the variable that makes a root process run only the
// tests a normal user can (make check sets it).
const UnprivilegedEnv = "CNIBOX_TEST_UNPRIVILEGED"

// Root reports whether the tests may use root's powers: the process runs as
// root and UnprivilegedEnv is not "1".
func Root() bool {
	return os.Geteuid() == 0 && os.Getenv(UnprivilegedEnv) != "1"
}

// RequireRoot skips the test unless Root reports true; why says what the
// test needs root for ("create network namespaces").
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if !Root() {
		t.Skipf("needs root to %s (not root, or %s=1)", why, UnprivilegedEnv)
	}
}
