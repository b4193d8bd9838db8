package ipvlan_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ipvlan"
)

// TestKernelWithoutIpvlan: on a kernel without ipvlan the ADD names what
// the node lacks (CONFIG_IPVLAN, module ipvlan; the kernel's own words are
// "Unknown device type") and leaves nothing; on one with it (make
// test-kernel) it succeeds.
func TestKernelWithoutIpvlan(t *testing.T) {
	n := roletest.NewNode(t, ipvlan.Role, hostlocal.Role)
	roletest.NewLAN(t, []string{"10.58.0.1/24"}, nil)
	p := n.NewPod("ipk")
	c := conf("1.0.0", "l2", v4)
	out, err := n.Call(ipvlan.Role, "ADD", p, c)
	if roletest.KernelKind(t, "ipvlan", err, 5) {
		n.CheckDelTwice(ipvlan.Role, p, c, out, "1.0.0", "ipvnet")
		return
	}
	n.Empty("ipvnet")
}
