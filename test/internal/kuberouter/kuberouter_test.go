package kuberouter

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBinary builds (or finds) kube-router and asks it its version: the
// binary the anchor runs is the release named.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kube-router from the module proxy the first time")
	}
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	if !strings.Contains(string(out), "version "+Version) {
		t.Errorf("%s --version says %q", bin, out)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatal(err)
	}
}
