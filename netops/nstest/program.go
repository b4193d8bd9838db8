package nstest

import (
	"os/exec"
	"testing"

	"github.com/cnibox/cnibox/internal/testenv"
)

// RequireProgram returns the path of program, or fails the test saying which
// Debian package has it: a test that needs etcd or podman does not pass by
// skipping on a machine that lacks them (`make deps` installs them all).
// Without root (make check) it skips instead: the programs' tests need root
// too, and a normal user's PATH may lack /usr/sbin (tc, nft).
func RequireProgram(t testing.TB, program, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil && !testenv.Root() {
		t.Skipf("%s not found (apt-get install %s), and not root", program, debianPackage)
	}
	if err != nil {
		t.Fatalf("%s not found: apt-get install %s (make deps installs it)", program, debianPackage)
	}
	return p
}
