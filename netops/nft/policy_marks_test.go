package nft_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPolicyFullSyncMarks: the full sync takes a policy chain as it is
// by its mark and its use count, without reading its rules
// (core_marks.go), and still sees what changed it: a rule someone
// deleted from a policy chain, or appended to one, is put back (one
// transaction, then none); a delta that rewrote a chain (policy 0's port
// moved) leaves the chain's old mark out, so a full sync of the model
// before the delta (the agent's, after the next delta failed) rewrites
// the chain instead of trusting the mark; a delta of a Handle that knows
// nothing of the table (all chains flushed and refilled) leaves marks
// after which a full sync sends nothing; marks someone flushed are
// written again (once) by the full sync, which finds the chains equal.
func TestPolicyFullSyncMarks(t *testing.T) { labtest.OnNFT(t, "pmarks", testPolicyFullSyncMarks) }

func testPolicyFullSyncMarks(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	sync := func(step string, hh *nft.Handle, c *nft.PolicyChange, wantTx uint64) {
		t.Helper()
		before := nft.Transactions()
		must(t, hh.ApplyPolicy(c))
		if n := nft.Transactions() - before; n != wantTx {
			t.Errorf("%s: %d transactions, want %d", step, n, wantTx)
		}
	}
	delta := func(port uint16) *nft.PolicyChange {
		c := richPolicies(20, port)
		c.Full = false
		return c
	}
	sync("first", h, richPolicies(20, 1000), 1)
	sync("again", h, richPolicies(20, 1000), 0)

	c := connOf(t, k)
	table := &nftables.Table{Name: nft.PolicyTable, Family: nftables.TableFamilyINet}
	chain := func(i int) string { return "n-" + policymodel.ChainID(fmt.Sprintf("np/t/p%d", i)) + "-in4" }
	handleIn := func(ch string) uint64 {
		t.Helper()
		hs, err := h.PolicyRuleHandles()
		must(t, err)
		for _, s := range hs {
			if rest, ok := strings.CutPrefix(s, ch+":"); ok {
				var hd uint64
				fmt.Sscanf(rest, "%d", &hd)
				return hd
			}
		}
		t.Fatalf("no rule in %s (%v)", ch, hs)
		return 0
	}

	// Someone deletes a rule of policy 3's chain.
	must(t, c.DelRule(&nftables.Rule{Table: table, Chain: &nftables.Chain{Name: chain(3), Table: table}, Handle: handleIn(chain(3))}))
	must(t, c.Flush())
	sync("a rule of a policy chain deleted", h, richPolicies(20, 1000), 1)
	sync("a rule of a policy chain deleted, again", h, richPolicies(20, 1000), 0)

	// Someone appends a rule to policy 4's chain.
	c.AddRule(&nftables.Rule{Table: table, Chain: &nftables.Chain{Name: chain(4), Table: table}, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
	must(t, c.Flush())
	sync("a rule appended to a policy chain", h, richPolicies(20, 1000), 1)
	sync("a rule appended to a policy chain, again", h, richPolicies(20, 1000), 0)

	// Someone flushes the marks (or an older cnibox wrote the table): the
	// chains are compared rule by rule, found equal, and given their
	// marks.
	c.FlushSet(&nftables.Set{Table: table, Name: "marks", KeyType: nftables.TypeIP6Addr})
	must(t, c.Flush())
	sync("the marks flushed", h, richPolicies(20, 1000), 1)
	sync("the marks flushed, again", h, richPolicies(20, 1000), 0)

	// A delta moves policy 0's port; the full sync of the model before it
	// puts it back.
	sync("a delta", h, delta(2000), 1)
	sync("the full sync of the model before the delta", h, richPolicies(20, 1000), 1)
	sync("the full sync of the model before the delta, again", h, richPolicies(20, 1000), 0)

	// A Handle that knows nothing of the table makes a delta.
	sync("a new Handle's delta", k.Open(), delta(2000), 1)
	sync("a full sync after a new Handle's delta", h, richPolicies(20, 2000), 0)
}
