package firewall_test

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles/firewall"
)

// TestDelConfigRefused: the firewall's config edited in place after ADD
// into one ADD refuses (an ingressPolicy that is none) does not stop DEL
// (twice): the pod's address leaves the firewall's map (issue 62).
func TestDelConfigRefused(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+t.TempDir()+"/no-bus")
	resetNode(t)
	a := newNet(t, "fwdelref")
	pa, prev, ip := a.pod("fwdelref")
	a.DelRefused(firewall.Role, pa, a.fwConf(prev, nil), map[string]any{"ingressPolicy": "closed"}, "ingressPolicy")
	waitMap(t, "pods4", func(m string) bool { return !strings.Contains(m, ip.String()+" ") })
}
