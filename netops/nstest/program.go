package nstest

import (
	"os/exec"
	"testing"
)

// RequireProgram returns the path of program, or fails the test saying which
// Debian package has it: a test that needs etcd or podman does not pass by
// skipping on a machine that lacks them (`make deps` installs them all).
func RequireProgram(t testing.TB, program, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		t.Fatalf("%s not found: apt-get install %s (make deps installs it)", program, debianPackage)
	}
	return p
}
