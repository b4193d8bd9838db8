package nft

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TestSourceCheckRewritesOlderRules: tables of the source check an older
// cnibox made (any link-local source passed, a neighbour advertisement for
// any link-local target too, no marker set) get this cnibox's rules with
// the next ADD's elements, in both kinds of table, so an upgraded node is
// fixed without a reboot; the ADD after that takes the fast path and
// changes no rule.
func TestSourceCheckRewritesOlderRules(t *testing.T) {
	onKernels(t, "srcold", testSourceCheckRewritesOlderRules)
}

func testSourceCheckRewritesOlderRules(t *testing.T, h *Handle) {
	if _, err := h.nftConn(); err != nil {
		t.Fatal(err)
	}
	a4, a6 := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00:1::2")
	nh, th := expr.PayloadBaseNetworkHeader, expr.PayloadBaseTransportHeader
	icmp6 := func(typ byte) []expr.Any { return append(l4(unix.IPPROTO_ICMPV6), load(th, 0, []byte{typ}, nil)...) }
	olderCheck6 := [][]expr.Any{
		rule(drop(), icmp6(134)),
		rule(drop(), icmp6(137)),
		rule(&expr.Verdict{Kind: expr.VerdictJump, Chain: "na6"}, icmp6(136)),
		rule(ret(), load(nh, 8, linkLocal, linkLocalMask)),
		rule(ret(), pairIn(nh, 8, 16, srcAddr6)),
		rule(ret(), load(nh, 8, make([]byte, 16), nil), l4(unix.IPPROTO_ICMPV6)),
		{drop()},
	}
	olderNA6 := [][]expr.Any{
		rule(ret(), load(th, 8, linkLocal, linkLocalMask)),
		rule(ret(), pairIn(th, 8, 16, srcAddr6)),
		{drop()},
	}
	for _, kind := range []SrcCheckKind{SrcCheckBridge, SrcCheckRouted} {
		family := kind.tables()[0].family
		table := &nftables.Table{Name: SrcCheckTable, Family: family}
		check6Handles := func() []uint64 {
			t.Helper()
			rules, err := h.nft.GetRules(table, &nftables.Chain{Name: "check6", Table: table})
			if err != nil {
				t.Fatal(err)
			}
			var out []uint64
			for _, r := range rules {
				out = append(out, r.Handle)
			}
			return out
		}
		check6Rules := func() int { t.Helper(); return len(check6Handles()) }
		if err := h.EnsureSourceCheck(kind, "cbxa", []netip.Addr{a4, a6}); err != nil {
			t.Fatal(err)
		}
		// Made older: the rules before issue 60, no chain nd6, no marker.
		tx := h.tx()
		c := tx.conn()
		check6, na6 := &nftables.Chain{Name: "check6", Table: table}, &nftables.Chain{Name: "na6", Table: table}
		c.FlushChain(check6)
		c.FlushChain(na6)
		c.DelChain(&nftables.Chain{Name: "nd6", Table: table})
		c.DelSet(&nftables.Set{Table: table, Name: srcRulesMark})
		for _, r := range olderCheck6 {
			c.AddRule(&nftables.Rule{Table: table, Chain: check6, Exprs: r})
		}
		for _, r := range olderNA6 {
			c.AddRule(&nftables.Rule{Table: table, Chain: na6, Exprs: r})
		}
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
		if n := check6Rules(); n != len(olderCheck6) {
			t.Fatalf("%v: the older check6 has %d rules, want %d", family, n, len(olderCheck6))
		}

		if err := h.EnsureSourceCheck(kind, "cbxb", []netip.Addr{a4.Next(), a6.Next()}); err != nil {
			t.Fatal(err)
		}
		if n := check6Rules(); n != len(ip6Rules()) {
			t.Errorf("%v: after an ADD check6 has %d rules, want this cnibox's %d", family, n, len(ip6Rules()))
		}
		if _, err := h.nft.GetSetByName(table, srcRulesMark); err != nil {
			t.Errorf("%v: marker set %s: %v", family, srcRulesMark, err)
		}
		before := check6Handles()
		if err := h.EnsureSourceCheck(kind, "cbxc", []netip.Addr{a6.Next().Next()}); err != nil {
			t.Fatal(err)
		}
		if after := check6Handles(); !slices.Equal(after, before) {
			t.Errorf("%v: the ADD after the rewrite wrote the rules again (handles %v, were %v)", family, after, before)
		}
		for _, port := range []string{"cbxa", "cbxb", "cbxc"} {
			if got, err := h.SourceCheckAddrs(kind, port); err != nil || len(got) < 2 {
				t.Errorf("%v: %s may send from %v (%v): its elements did not stay", family, port, got, err)
			}
		}
	}
}
