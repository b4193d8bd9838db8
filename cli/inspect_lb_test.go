package cli

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/store"
)

// TestInspectLB: cnibox inspect lb shows what the agent recorded (the
// pools with their size, used and free counts, each address with its
// Services, its traffic policy, its announcer and this node's part, an
// address that no node may announce and why), as a table and as JSON; a
// store without a record says where the addresses come from, and --json
// gives empty lists.
func TestInspectLB(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	out, _, code := runApp("inspect", "lb", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "no load balancer addresses recorded") || !strings.Contains(out, "--lb-announce") {
		t.Errorf("without a record: exit %d\n%s", code, out)
	}
	out, _, _ = runApp("inspect", "lb", "--data-dir", dir, "--json")
	var empty store.LBState
	if err := json.Unmarshal([]byte(out), &empty); err != nil || empty.Pools == nil || empty.Addresses == nil {
		t.Errorf("--json without a record: %v\n%s", err, out)
	}

	rec := store.LBState{Node: "n2", Uplink: "eth0", Takeovers: 1,
		Pools: []store.LBPool{{Name: "lan", Total: 10, Used: 2}, {Name: "v6", Total: 1 << 64}},
		Addresses: []store.LBAddress{
			{IP: netip.MustParseAddr("192.0.2.200"), Pool: "lan", Services: []string{"web/a", "web/b"}, Holder: "n1", Eligible: true, Rank: 1, Candidates: 2},
			{IP: netip.MustParseAddr("192.0.2.201"), Pool: "lan", Services: []string{"web/c"}, Local: true, Holder: "n2", Eligible: true, Candidates: 1},
			{IP: netip.MustParseAddr("203.0.113.9"), Services: []string{"web/d"}, Why: "in no LoadBalancerIPPool: not cnibox's to announce"},
		}}
	st, err = store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutLB(rec); err != nil {
		t.Fatal(err)
	}
	st.Close()
	out, _, code = runApp("inspect", "lb", "--data-dir", dir)
	for _, want := range []string{"node n2, uplink eth0, 1 takeovers", "lan", "~2^64", "192.0.2.200", "web/a,web/b", "may, rank 1",
		"192.0.2.201", "Local", "announces it", "203.0.113.9: not announced: in no LoadBalancerIPPool"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
		return slices.Equal(strings.Fields(l), []string{"lan", "10", "2", "8", "in", "use"})
	}) {
		t.Errorf("pool lan: want size 10, used 2, free 8:\n%s", out)
	}
	out, _, _ = runApp("inspect", "lb", "--data-dir", dir, "--json")
	var got store.LBState
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Addresses) != 3 || got.Addresses[0].Holder != "n1" || got.Pools[0].Used != 2 {
		t.Errorf("--json: %v\n%s", err, out)
	}
}
