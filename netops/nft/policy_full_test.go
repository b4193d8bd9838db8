package nft_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// richPolicies is a full sync of n NetworkPolicies (manyPolicies) with
// what else a table holds: an Admin tier policy whose peer is a CIDR set
// (an interval set) and whose ports are named (a Ported set), a
// domainNames peer (a Pairs set, kept), the guard, and the flow log on
// (its meters' sets, log rules). port moves the port of policy 0.
func richPolicies(n int, port uint16) *nft.PolicyChange {
	c := manyPolicies(n)
	r := c.Rules
	r.Ingress.NetworkPolicy[0].Rules[0].Clauses[0].Ports[0] = policymodel.PortRange{Proto: policymodel.TCP, First: port, Last: port}
	r.Log = policymodel.FlowLog{Deny: policymodel.LogScope{All: true}, Allow: policymodel.LogScope{Set: "dst"}}
	r.Egress.Admin = []*policymodel.Policy{{ID: "cnp/a", Tier: policymodel.TierAdmin, Subject: "dst", Rules: []policymodel.Rule{
		{ID: policymodel.NewRuleID("cnp/a", policymodel.Egress, 0), Action: policymodel.Deny,
			Clauses: []policymodel.Clause{{Peer: "nets", DstPorts: "named"}}},
		{ID: policymodel.NewRuleID("cnp/a", policymodel.Egress, 1), Action: policymodel.Allow,
			Clauses: []policymodel.Clause{{Pairs: "fqdn"}}},
	}}}
	c.Sets = append(c.Sets,
		policymodel.NewSet("nets", policymodel.CIDRs, "nets",
			policymodel.Elem{Prefix: netip.MustParsePrefix("192.0.2.0/24")}, policymodel.Elem{Prefix: netip.MustParsePrefix("2001:db8::/32")}),
		policymodel.NewSet("named", policymodel.Ported, "named",
			policymodel.Elem{Prefix: netip.MustParsePrefix("10.99.0.9/32"), Proto: policymodel.TCP, Port: 8080}),
		policymodel.NewSet("fqdn", policymodel.Pairs, "fqdn"))
	c.Guard = &nft.PolicyGuard{Namespaces: []string{"t"}}
	return c
}

// TestPolicyFullSyncUnchanged: a full sync of the model the table holds
// sends no transaction (the generation stays); one after a policy
// changed rewrites that policy's chains only (every other rule keeps its
// handle, every counter its count); one after someone deleted a rule of a
// chain, or flushed a map of the verdict cache, puts it back (a new
// generation), in one transaction each. The full sync before
// flushed and rewrote every chain and set at each call (the agent's
// resync, every 5 minutes).
func TestPolicyFullSyncUnchanged(t *testing.T) {
	labtest.OnNFT(t, "pfull", testPolicyFullSyncUnchanged)
}

func testPolicyFullSyncUnchanged(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	sync := func(step string, c *nft.PolicyChange, wantTx uint64) {
		t.Helper()
		before := nft.Transactions()
		must(t, h.ApplyPolicy(c))
		if n := nft.Transactions() - before; n != wantTx {
			t.Errorf("%s: %d transactions, want %d", step, n, wantTx)
		}
	}
	sync("first", richPolicies(20, 1000), 1)
	gen := h.PolicyGen()
	sync("again", richPolicies(20, 1000), 0)
	// Another Handle (a restarted agent) knows nothing of the table.
	other := k.Open()
	before := nft.Transactions()
	must(t, other.ApplyPolicy(richPolicies(20, 1000)))
	if n := nft.Transactions() - before; n != 0 {
		t.Errorf("a new Handle's full sync: %d transactions, want none", n)
	}
	if g := other.PolicyGen(); g != gen {
		t.Errorf("the generation moved from %d to %d without a change", gen, g)
	}

	handles, err := h.PolicyRuleHandles()
	must(t, err)
	if k.Fake != nil {
		for _, c := range []string{"c-pending", policymodel.CounterName(policymodel.NewRuleID("np/t/p1", policymodel.Ingress, 0).Key())} {
			if !k.Fake.SetCounter(nftables.TableFamilyINet, nft.PolicyTable, c, 5, 500) {
				t.Fatalf("no counter %s", c)
			}
		}
	}
	sync("policy 0 changed", richPolicies(20, 2000), 1)
	after, err := h.PolicyRuleHandles()
	must(t, err)
	changed := map[string]bool{}
	for _, hd := range symDiff(handles, after) {
		changed[strings.Split(hd, ":")[0]] = true
	}
	chain := "n-" + policymodel.ChainID("np/t/p0") + "-in"
	for c := range changed {
		if !strings.HasPrefix(c, chain) {
			t.Errorf("chain %s was rewritten; only policy 0's (%s4, %[2]s6 and their twins) should be", c, chain)
		}
	}
	if !changed[chain+"4"] || !changed[chain+"6u"] {
		t.Errorf("policy 0's chains were not rewritten (%v)", changed)
	}
	if k.Fake != nil {
		counters, err := h.PolicyCounters()
		must(t, err)
		if c := counters["c-pending"]; c.Packets != 5 {
			t.Errorf("c-pending has %d packets after the full sync, want the 5 it had", c.Packets)
		}
	}
	sync("policy 0 changed, again", richPolicies(20, 2000), 0)

	// Someone deletes a rule of a chain.
	c := connOf(t, k)
	table := &nftables.Table{Name: nft.PolicyTable, Family: nftables.TableFamilyINet}
	var hd uint64
	for _, s := range after {
		if strings.HasPrefix(s, "fwd4:") {
			fmt.Sscanf(strings.TrimPrefix(s, "fwd4:"), "%d", &hd)
			break
		}
	}
	must(t, c.DelRule(&nftables.Rule{Table: table, Chain: &nftables.Chain{Name: "fwd4", Table: table}, Handle: hd}))
	must(t, c.Flush())
	sync("a rule of fwd4 deleted", richPolicies(20, 2000), 1)
	sync("a rule of fwd4 deleted, again", richPolicies(20, 2000), 0)

	// Someone flushes a map of the verdict cache: a new generation.
	gen = h.PolicyGen()
	c.FlushSet(&nftables.Set{Table: table, Name: "mark-eg", IsMap: true, KeyType: nftables.TypeMark, DataType: nftables.TypeMark})
	must(t, c.Flush())
	sync("the verdict cache's map flushed", richPolicies(20, 2000), 1)
	if h.PolicyGen() == gen {
		t.Errorf("the verdict cache's map flushed: the generation stayed at %d", gen)
	}
	sync("the verdict cache's map flushed, again", richPolicies(20, 2000), 0)
}

// symDiff is what is in one of a and b only.
func symDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestPolicyFullSyncChunked: a full sync whose difference is larger than
// a transaction's bound goes as several transactions, each taken by the
// kernel (which checks every reference at every step), each with a new
// generation; the table it leaves is the model's (a full sync after it
// sends nothing), from nothing and from a table of another model (chains,
// sets and counters gone, others new).
func TestPolicyFullSyncChunked(t *testing.T) { labtest.OnNFT(t, "pchunk", testPolicyFullSyncChunked) }

func testPolicyFullSyncChunked(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	nft.SetPolicyChunk(t, 16<<10)
	nft.SetPolicyChunkMsgs(t, 400)
	for _, step := range []struct {
		what string
		c    *nft.PolicyChange
	}{
		{"from nothing", richPolicies(60, 1000)},
		{"to another model", manyPolicies(30)},
		{"back", richPolicies(60, 1500)},
	} {
		gen := h.PolicyGen()
		before := nft.Transactions()
		must(t, h.ApplyPolicy(step.c))
		if n := nft.Transactions() - before; n < 3 {
			t.Errorf("%s: %d transactions, want the difference cut in several", step.what, n)
		}
		if h.PolicyGen() == gen {
			t.Errorf("%s: the generation stayed at %d", step.what, gen)
		}
		before = nft.Transactions()
		must(t, k.Open().ApplyPolicy(step.c))
		if n := nft.Transactions() - before; n != 0 {
			t.Errorf("%s: a full sync after it sent %d transactions, want none", step.what, n)
		}
	}
}
