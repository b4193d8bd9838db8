package ipvlan_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ipvlan"
)

// TestDelConfigRefused: an ipvlan config edited in place after ADD into one
// ADD refuses (mtu 70000) does not stop DEL (twice): the pod's device, its
// record and its addresses go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n := roletest.NewNode(t, ipvlan.Role, hostlocal.Role)
	newLAN(t)
	p := n.NewPod("delref")
	n.DelRefused(ipvlan.Role, p, conf("1.0.0", "l2", v4), map[string]any{"mtu": 70000}, "mtu")
	if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is still there after DEL")
	}
	n.Empty("ipvnet")
}
