package dummy_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/dummy"
)

// TestDelConfigRefused: a dummy config edited in place after ADD into one
// ADD refuses (a mode, which a dummy device has not) does not stop DEL
// (twice): the pod's device, its record and its addresses go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	requireDummy(t)
	n := newNode(t)
	p := n.NewPod("delref")
	n.DelRefused(dummy.Role, p, conf("1.0.0", v4), map[string]any{"mode": "bridge"}, "mode")
	if _, err := open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is still there after DEL")
	}
	n.Empty("dmnet")
}
