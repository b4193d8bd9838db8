package ptp_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

// TestDelConfigRefused: a config edited in place after ADD into one ADD
// refuses (mtu 70000) does not stop DEL (twice): the pod's interface, its
// host end, its record and its addresses go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("delref")
	n.DelRefused(ptp.Role, p, conf("1.0.0", v4, `,"mtu":1400`), map[string]any{"mtu": 70000}, "mtu")
	if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is still there after DEL")
	}
	if _, err := roletest.Open(t, "").LinkByName(attach.HostVethName(p.ID, "eth0")); err == nil {
		t.Error("the pod's host end is still there after DEL")
	}
	n.Empty("ptpnet")
}
