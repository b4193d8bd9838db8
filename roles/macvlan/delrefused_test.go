package macvlan_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

// TestDelConfigRefused: a config edited in place after ADD into one ADD
// refuses (an mtu out of range; a mode macvlan has not) does not stop DEL
// (twice): the pod's device, its record and its addresses go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields map[string]any
		drop   string
	}{
		{"mtu", map[string]any{"mtu": 70000}, "mtu"},
		{"mode", map[string]any{"mode": "l3s"}, "mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			newLAN(t)
			p := n.NewPod("delref")
			n.DelRefused(macvlan.Role, p, conf("1.0.0", v4, `,"master":"lan0","mtu":1400`), tc.fields, tc.drop)
			if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
				t.Error("the pod's eth0 is still there after DEL")
			}
			n.Empty("mvnet")
		})
	}
}
