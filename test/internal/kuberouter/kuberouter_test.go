package kuberouter

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// buildEnv, set to 1, lets TestBinary build kube-router when the user's
// cache lacks it (make soak sets it). Without it the test checks the
// cached build only: make test does not spend that build (minutes on 2
// cores from an empty module cache, most of make test's time on a fresh
// machine for this package) on a binary it never runs; make
// test-conformance's netpol-anchor and make bench-policy, which run it,
// build it through Binary themselves.
const buildEnv = "CNIBOX_KUBE_ROUTER_BUILD"

// TestBinary builds (or finds) kube-router and asks it its version: the
// binary the anchor runs is the release named.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kube-router from the module proxy the first time")
	}
	if os.Getenv(BinaryEnv) == "" && !Cached() && os.Getenv(buildEnv) != "1" {
		t.Skipf("kube-router %s is not built yet: %s=1 builds it (make soak does; make test-conformance's netpol-anchor and make bench-policy build it when they need it)", Version, buildEnv)
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
