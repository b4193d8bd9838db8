package vlan_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/vlan"
)

// TestDelConfigRefused: a vlan config edited in place after ADD into one
// ADD refuses (a mode, which a vlan device has not) does not stop DEL
// (twice): the pod's device, its record and its addresses go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n := newNode(t)
	newVLAN(t)
	p := n.NewPod("delref")
	n.DelRefused(vlan.Role, p, conf("1.0.0", v4, `,"vlanId":42,"mtu":1400`), map[string]any{"mode": "l2"}, "mode")
	if _, err := open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is still there after DEL")
	}
	n.Empty("vlnet")
}
