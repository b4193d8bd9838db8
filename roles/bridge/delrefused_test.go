package bridge_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestDelConfigRefused: a pod added with mtu 1400 whose conflist is then
// edited in place into one ADD refuses (mtu 70000; a bad CIDR in the
// range, which DEL does not need) is deleted all the same, twice, as the
// reference bridge does: its veth, its record and its address go (issue
// 62: DEL answered 7 and the pod stayed Terminating holding its address).
func TestDelConfigRefused(t *testing.T) {
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brdelref") })
	for _, tc := range []struct {
		name   string
		fields map[string]any
		drop   string
	}{
		{"mtu", map[string]any{"mtu": 70000}, "mtu"},
		{"range", map[string]any{"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": "10.11.40.0/33"}}}}}, "ipam.ranges"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
			c := gwConf("delref", "brdelref", 40, `"mtu":1400,"ipMasq":true,`)
			p := n.NewPod("delref")
			n.DelRefused(bridge.Role, p, c, tc.fields, tc.drop)
			if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
				t.Error("the pod's eth0 is still there after DEL")
			}
			if _, err := host.LinkByName(bridge.HostVethName(p.ID, "eth0")); err == nil {
				t.Error("the pod's host veth is still there after DEL")
			}
			n.Empty("delref")
		})
	}
}
