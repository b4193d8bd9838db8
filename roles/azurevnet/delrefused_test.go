package azurevnet_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/azurevnet"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestDelConfigRefused: a transparent azure-vnet config edited in place
// after ADD into one ADD refuses (mtu 70000; an ipsToRouteViaHost entry
// that is no address) does not stop DEL (twice): the pod's interface, its
// host end, its record and its addresses go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	host := roletest.Open(t, "")
	nicNode(t, host)
	for _, tc := range []struct {
		name   string
		fields map[string]any
		drop   string
	}{
		{"mtu", map[string]any{"mtu": 70000}, "mtu"},
		{"ipsToRouteViaHost", map[string]any{"ipsToRouteViaHost": []string{"nowhere"}}, "ipsToRouteViaHost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := roletest.NewNode(t, azurevnet.Role, hostlocal.Role)
			p := n.NewPod("delref")
			n.DelRefused(azurevnet.Role, p, tconf("1.0.0", `,"mtu":1400`), tc.fields, tc.drop)
			if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
				t.Error("the pod's eth0 is still there after DEL")
			}
			if _, err := host.LinkByName(azurevnet.HostVethName(p.ID, "eth0")); err == nil {
				t.Error("the pod's host end is still there after DEL")
			}
			n.Empty("aznet")
		})
	}
}
