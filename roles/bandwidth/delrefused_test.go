package bandwidth_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
)

// TestDelConfigRefused: bandwidth's config edited in place after ADD into
// one ADD refuses (an egress rate without its burst) does not stop DEL
// (twice): it reads its record, not the config, and removes the tbf, the
// redirect and the ifb (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n := chaintest.NewNode(t)
	p := n.NewPod("bwdelref")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.0.0"))
	hostIf := chaintest.Result(t, prev, "1.0.0").Interfaces[1].Name
	n.DelRefused(bandwidth.Role, p, n.Conf("1.0.0", "bandwidth", tbLimits, prev), map[string]any{"egressBurst": 0}, "")
	if b := tbShaping(t, hostIf); b.hostShaped || b.redirectTo != 0 || len(b.ifbs) != 0 {
		t.Errorf("after DEL: host tbf %v, redirect %d, ifbs %v; want none", b.hostShaped, b.redirectTo, b.ifbs)
	}
	if recs := bandwidthRecords(n); len(recs) != 0 {
		t.Errorf("records after DEL: %+v", recs)
	}
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.0.0"))
}
