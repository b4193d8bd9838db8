package nft_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPolicyFullSyncReplacedRule: a rule someone replaced in place in a
// marked policy chain (`nft replace rule`: the chain's use count and mark
// stay) is put back by one of the next nft.PolicyAuditSlices full syncs
// (each reads another slice of the marked chains rule by rule), in one
// transaction, after which the full syncs send nothing; and by the first
// full sync of a new Handle (which reads them all).
func TestPolicyFullSyncReplacedRule(t *testing.T) {
	labtest.OnNFT(t, "paudit", testPolicyFullSyncReplacedRule)
}

func testPolicyFullSyncReplacedRule(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	model := func() *nft.PolicyChange { return richPolicies(20, 1000) }
	must(t, h.ApplyPolicy(model()))
	must(t, h.ApplyPolicy(model()))

	c, reader := connOf(t, k), k.Open()
	table := &nftables.Table{Name: nft.PolicyTable, Family: nftables.TableFamilyINet}
	chain := &nftables.Chain{Name: "n-" + policymodel.ChainID("np/t/p3") + "-in4", Table: table}
	rules := func() []*nftables.Rule {
		t.Helper()
		rs, err := reader.ChainRules(table, chain.Name)
		must(t, err)
		if len(rs) == 0 {
			t.Fatalf("chain %s has no rules", chain.Name)
		}
		return rs
	}
	exprs := func(rs []*nftables.Rule) [][]expr.Any {
		out := make([][]expr.Any, len(rs))
		for i, r := range rs {
			out[i] = r.Exprs
		}
		return out
	}
	want := exprs(rules())
	replace := func() {
		t.Helper()
		first := rules()[0]
		c.ReplaceRule(&nftables.Rule{Table: table, Chain: chain, Handle: first.Handle,
			Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
		must(t, c.Flush())
		if got := exprs(rules()); reflect.DeepEqual(got, want) || len(got) != len(want) {
			t.Fatalf("the replace did not replace the rule in place: %d rules, want %d changed", len(got), len(want))
		}
	}

	// Replaced in place: one of the next PolicyAuditSlices full syncs
	// (and only one) puts it back.
	replace()
	repairedAt := 0
	for i := 1; i <= nft.PolicyAuditSlices && repairedAt == 0; i++ {
		before := nft.Transactions()
		must(t, h.ApplyPolicy(model()))
		n := nft.Transactions() - before
		if n > 1 {
			t.Fatalf("full sync %d after the replace: %d transactions, want at most 1", i, n)
		}
		if reflect.DeepEqual(exprs(rules()), want) {
			if n != 1 {
				t.Fatalf("full sync %d after the replace: the chain is back with %d transactions, want 1", i, n)
			}
			repairedAt = i
		}
	}
	if repairedAt == 0 {
		t.Fatalf("a rule replaced in place in %s: not put back after %d full syncs", chain.Name, nft.PolicyAuditSlices)
	}
	t.Logf("put back by full sync %d of %d", repairedAt, nft.PolicyAuditSlices)
	for i := range nft.PolicyAuditSlices {
		before := nft.Transactions()
		must(t, h.ApplyPolicy(model()))
		if n := nft.Transactions() - before; n != 0 {
			t.Fatalf("full sync %d after the repair: %d transactions, want 0", i+1, n)
		}
	}

	// A new Handle's first full sync reads every marked chain.
	replace()
	before := nft.Transactions()
	must(t, k.Open().ApplyPolicy(model()))
	if n := nft.Transactions() - before; n != 1 {
		t.Errorf("a new Handle's first full sync after the replace: %d transactions, want 1", n)
	}
	if got := exprs(rules()); !reflect.DeepEqual(got, want) {
		t.Errorf("a new Handle's first full sync did not put back %s: %s", chain.Name, fmt.Sprint(got))
	}
}
