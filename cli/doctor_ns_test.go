package cli

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestDoctorOutsideNodeNS: doctor run in another network namespace than
// the node's says so first, with the way in, and its node checks' fixes
// point at that instead of at the machine (a sysctl, a bridge); in the
// node's namespace (the same file twice) nothing is said.
func TestDoctorOutsideNodeNS(t *testing.T) {
	nstest.RequireRoot(t)
	// The test's own namespace stands for the node's (PID 1's may be
	// unreadable here, which doctor reads as "cannot tell").
	other := nstest.NewNS(t, "doctorns")
	d := &doctor{}
	d.checkNodeNS(other, selfNetNS)
	if len(d.results) != 1 || d.results[0].Status != statusFail || !strings.Contains(d.results[0].Fix, "nsenter --target 1 --net") {
		t.Fatalf("outside the node's namespace: %+v", d.results)
	}
	if fix := d.nodeFix("sysctl -w net.ipv4.ip_forward=1"); strings.Contains(fix, "sysctl") || !strings.Contains(fix, "namespace") {
		t.Errorf("a node check's fix outside the node's namespace: %q", fix)
	}
	for _, paths := range [][2]string{{selfNetNS, selfNetNS}, {other, "/nonexistent/ns/net"}} {
		d = &doctor{}
		d.checkNodeNS(paths[0], paths[1])
		if len(d.results) != 0 || d.nodeFix("ip link set br0 up") != "ip link set br0 up" {
			t.Errorf("%v (the same namespace, or one that cannot be told): %+v", paths, d.results)
		}
	}
}
