package tuning_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
	"github.com/cnibox/cnibox/roles/tuning"
)

// TestDelConfigRefused: tuning's config edited in place after ADD into one
// ADD refuses (mtu 70000) does not stop DEL (twice): it reads its record,
// not the config, and puts eth0's MTU and the sysctls back (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n := chaintest.NewNode(t)
	p := n.NewPod("tundelref")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.0.0"))
	before := chaintest.Link(t, p.Netns, "eth0")
	somax := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn")
	conf := n.Conf("1.0.0", "tuning", tbTuningFields(), prev)
	n.DelRefused(tuning.Role, p, conf, map[string]any{"mtu": 70000}, "")
	if got := chaintest.Link(t, p.Netns, "eth0"); got.MTU != before.MTU || got.MAC.String() != before.MAC.String() {
		t.Errorf("eth0 after DEL = %+v, want MTU %d and MAC %s back", got, before.MTU, before.MAC)
	}
	if got := chaintest.Sysctl(t, p.Netns, "net.core.somaxconn"); got != somax {
		t.Errorf("somaxconn after DEL = %s, want %s back", got, somax)
	}
	if recs := tuningRecords(n); len(recs) != 0 {
		t.Errorf("records after DEL: %+v", recs)
	}
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.0.0"))
}
