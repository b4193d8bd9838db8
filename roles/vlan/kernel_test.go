package vlan_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vlan"
)

// TestKernelWithoutVlan: on a kernel without 802.1Q the ADD names what the
// node lacks (CONFIG_VLAN_8021Q, module 8021q) and leaves nothing; on one
// with it (make test-kernel) it succeeds.
func TestKernelWithoutVlan(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("vlk")
	c := conf("1.0.0", v4, `,"vlanId":42`)
	out, err := n.Call(vlan.Role, "ADD", p, c)
	if roletest.KernelKind(t, "vlan", err, 5) {
		n.CheckDelTwice(vlan.Role, p, c, out, "1.0.0", "vlnet")
		return
	}
	n.Empty("vlnet")
}
