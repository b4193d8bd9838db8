package nft

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables/binaryutil"
	mdnetlink "github.com/mdlayher/netlink"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestPendingMsgs: without the policy table MarkPolicyPending has nothing
// to send; with it, the attached set's elements of each family and, when
// guarded, the pending set's and the verdict cache's gen set emptied.
func TestPendingMsgs(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("10.11.0.5"), netip.MustParseAddr("fd11::5")}
	sets := func(msgs []mdnetlink.Message) []string {
		var out []string
		for _, m := range msgs {
			set, _, err := parseNftElems(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, set)
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		table, guarded bool
		want           []string
	}{
		{"no table", false, false, nil},
		{"no table, guarded", false, true, nil},
		{"table", true, false, []string{"attached-4", "attached-6"}},
		{"table, guarded", true, true, []string{"attached-4", "attached-6", "pending-4", "pending-6", "gen-f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sets(pendingMsgs(tc.table, tc.guarded, addrs)); !slices.Equal(got, tc.want) {
				t.Errorf("pendingMsgs(%v, %v) write to %v, want %v", tc.table, tc.guarded, got, tc.want)
			}
		})
	}
}

// TestPolicyPendingNoTable: a pod's ADD and DEL (MarkPolicyPending,
// UnmarkPolicyPending, UnhookPod) on a node without the policy table send
// no nftables transaction (one refused for a missing table costs the call
// the kernel's abort, ~11 ms) and make no table; with the agent's table the
// ADD's addresses land in the attached set (and pending where guarded) in
// one transaction, and the DEL takes them out.
func TestPolicyPendingNoTable(t *testing.T) { onKernels(t, "pnt", testPolicyPendingNoTable) }

func testPolicyPendingNoTable(t *testing.T, h *Handle) {
	addrs := []netip.Addr{netip.MustParseAddr("10.11.0.5"), netip.MustParseAddr("fd11::5")}
	unhook := PodUnhook{IPs: addrs, Masq: true, CheckedPort: "vethpnt", CheckKind: SrcCheckBridge}
	sent := func(what string, want uint64, call func() error) {
		t.Helper()
		before := Transactions()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := Transactions() - before; n != want {
			t.Errorf("%s sent %d nftables transactions, want %d", what, n, want)
		}
	}
	mark := func(ns string, want bool) func() error {
		return func() error {
			got, err := h.MarkPolicyPending(ns, addrs)
			if err == nil && got != want {
				t.Errorf("MarkPolicyPending(%s) = %v, want %v", ns, got, want)
			}
			return err
		}
	}

	sent("ADD without the table", 0, mark("default", false))
	sent("ADD undone without the table", 0, func() error { return h.UnmarkPolicyPending(addrs) })
	sent("DEL without the table", 0, func() error { return h.UnhookPod(unhook) })
	if ok, err := h.nftTableExists(uint8(policyFamily), PolicyTable); err != nil || ok {
		t.Fatalf("policy table after the calls: %v, %v; want none", ok, err)
	}

	// The table as the agent's first full sync makes it, guarding "guarded".
	err := h.ApplyPolicy(&PolicyChange{Full: true, Rules: &policymodel.Rules{NodeAddrs: "node"},
		Sets:  []*policymodel.Set{policymodel.NewSet("node", policymodel.Addrs, "", policymodel.AddrElem(netip.MustParseAddr("10.11.0.1")))},
		Guard: &PolicyGuard{Namespaces: []string{"guarded"}}})
	if err != nil {
		t.Fatal(err)
	}
	in := func(set string, want []netip.Addr) {
		t.Helper()
		got, _, err := h.PolicySetAddrs(set)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %v (%v), want %v", set, got, err, want)
		}
	}
	sent("ADD with the table", 1, mark("default", false))
	in(PolicyAttached, addrs)
	in(PolicyPending, nil)
	sent("DEL with the table", 1, func() error { return h.UnhookPod(PodUnhook{IPs: addrs}) })
	in(PolicyAttached, nil)
	sent("guarded ADD", 1, mark("guarded", true))
	in(PolicyAttached, addrs)
	in(PolicyPending, addrs)
	sent("guarded ADD undone", 1, func() error { return h.UnmarkPolicyPending(addrs) })
	in(PolicyAttached, nil)
	in(PolicyPending, nil)
}

// TestPolicyAddEmptiesCache: a pod's ADD that marks it pending empties the
// verdict cache's gen-f set (the entry chains accept a connection cached
// by gen-f before the pending check: an earlier pod's connection at the
// new pod's address must meet it), leaves the rest of the generation
// (gen, after the pending check) alone, and the agent goes on from its
// generation: its next delta writes the one after into both, and so does
// a full sync of a Handle that knew nothing (a restarted agent).
func TestPolicyAddEmptiesCache(t *testing.T) { onKernels(t, "pac", testPolicyAddEmptiesCache) }

func testPolicyAddEmptiesCache(t *testing.T, h *Handle) {
	addrs := []netip.Addr{netip.MustParseAddr("10.11.0.5"), netip.MustParseAddr("fd11::5")}
	rules := &policymodel.Rules{NodeAddrs: "node"}
	sets := []*policymodel.Set{policymodel.NewSet("node", policymodel.Addrs, "", policymodel.AddrElem(netip.MustParseAddr("10.11.0.1")))}
	gen := func(set string) []uint32 {
		t.Helper()
		elems, err := h.dumpElems(PolicyTable, set)
		if err != nil {
			t.Fatalf("list %s: %v", set, err)
		}
		var out []uint32
		for _, e := range elems {
			out = append(out, binaryutil.NativeEndian.Uint32(e.key)>>policyGenShift)
		}
		return out
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	both := func(what string, want []uint32) {
		t.Helper()
		for _, set := range []string{policyGenFastSet, policyGenSet} {
			if got := gen(set); !slices.Equal(got, want) {
				t.Errorf("%s: %s %v, want %v", what, set, got, want)
			}
		}
	}
	must(h.ApplyPolicy(&PolicyChange{Full: true, Rules: rules, Sets: sets, Guard: &PolicyGuard{All: true}}))
	g := gen(policyGenSet)
	if len(g) != 1 {
		t.Fatalf("after the first sync: gen %v, want one generation", g)
	}
	both("after the first sync", g)
	if _, err := h.MarkPolicyPending("x", addrs); err != nil {
		t.Fatal(err)
	}
	if got := gen(policyGenFastSet); len(got) != 0 {
		t.Errorf("after an ADD: gen-f %v, want empty (the pending check before the cache until the agent's next generation)", got)
	}
	if got := gen(policyGenSet); !slices.Equal(got, g) {
		t.Errorf("after an ADD: gen %v, want %v as it was", got, g)
	}
	must(h.ApplyPolicy(&PolicyChange{Resolved: addrs}))
	both("the agent's delta after the ADD", []uint32{nextGen(g[0])})
	g = gen(policyGenSet)
	if _, err := h.MarkPolicyPending("x", addrs); err != nil {
		t.Fatal(err)
	}
	policyOf(h).forget() // an agent that knows nothing of the table
	must(h.ApplyPolicy(&PolicyChange{Full: true, Rules: rules, Sets: sets, Guard: &PolicyGuard{All: true}, Resolved: addrs}))
	both("a restarted agent's full sync after an ADD", []uint32{nextGen(g[0])})
}
