package tap_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/tap"
)

// TestDelConfigRefused: a config edited in place after ADD into one ADD
// refuses (mtu 70000) does not stop DEL (twice): the pod's tap, its record
// and its addresses go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	requireTap(t)
	n := newNode(t)
	p := n.NewPod("delref")
	n.DelRefused(tap.Role, p, conf("1.0.0", v4, `,"mtu":1400`), map[string]any{"mtu": 70000}, "mtu")
	if _, err := open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's tap eth0 is still there after DEL")
	}
	n.Empty("tapnet")
}
