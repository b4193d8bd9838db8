package cli

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/store"
)

// TestInspectEgress: cnibox inspect egress shows what the agent recorded
// (each address, its holder, this node's part, its pods here, a gateway
// that is not ready and why), as a table and as JSON; a store without a
// record says where egress gateways come from, and --json gives an empty
// list.
func TestInspectEgress(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	out, _, code := runApp("inspect", "egress", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "no egress gateways recorded") || !strings.Contains(out, "egressgateway-crd.yaml") {
		t.Errorf("without a record: exit %d\n%s", code, out)
	}
	out, _, _ = runApp("inspect", "egress", "--data-dir", dir, "--json")
	var empty store.EgressState
	if err := json.Unmarshal([]byte(out), &empty); err != nil || empty.Gateways == nil || len(empty.Gateways) != 0 {
		t.Errorf("--json without a record: %v\n%s", err, out)
	}

	rec := store.EgressState{Node: "n3", Uplink: "eth0", Takeovers: 2, Gateways: []store.EgressGateway{
		{Name: "payments", Ready: true, IPs: []store.EgressIP{
			{IP: netip.MustParseAddr("192.0.2.50"), Holder: "n1", Eligible: true, Rank: 1, LocalPods: []string{"pay/api-0", "pay/api-1"}, Pods: 5},
			{IP: netip.MustParseAddr("192.0.2.51"), Holder: "n3", Eligible: true, Pods: 2},
		}},
		{Name: "nowhere", Reason: "NoEligibleNode", Message: "spec.egressIPs[0] 203.0.113.1: no node that spec.nodeSelector selects has it in its network", IPs: []store.EgressIP{
			{IP: netip.MustParseAddr("203.0.113.1")},
		}},
	}}
	st, err = store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutEgress(rec); err != nil {
		t.Fatal(err)
	}
	st.Close()
	out, _, code = runApp("inspect", "egress", "--data-dir", dir)
	for _, want := range []string{"node n3, uplink eth0, 2 takeovers", "192.0.2.50", "eligible, rank 1", "pay/api-0,pay/api-1",
		"192.0.2.51", "holds it", "203.0.113.1", "not eligible", "nowhere: NoEligibleNode: spec.egressIPs[0] 203.0.113.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	out, _, _ = runApp("inspect", "egress", "--data-dir", dir, "--json")
	var got store.EgressState
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Gateways) != 2 || got.Gateways[0].IPs[0].Holder != "n1" || got.Gateways[0].IPs[0].LocalPods[1] != "pay/api-1" {
		t.Errorf("--json: %v %+v\n%s", err, got, out)
	}
}
