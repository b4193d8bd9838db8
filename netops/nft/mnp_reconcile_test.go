package nft_test

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPodPolicyReconciled: a pod's MultiNetworkPolicy table applied again
// as it is sends no transaction (compared with the kernel's, rules that
// load conntrack addresses included), and one someone changed (a rule
// deleted, a chain flushed, an element taken out of a set) is put right by
// one. ApplyPodPolicy before deleted and wrote the whole table at every
// call.
func TestPodPolicyReconciled(t *testing.T) { labtest.OnNFT(t, "mnprec", testPodPolicyReconciled) }

func testPodPolicyReconciled(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	peer := policymodel.NewSet("peer", policymodel.Addrs, "the peer",
		policymodel.AddrElem(netip.MustParseAddr("192.0.2.1")), policymodel.AddrElem(netip.MustParseAddr("2001:db8::1")))
	allow := &policymodel.Policy{ID: "mnp/t/in", Tier: policymodel.TierNetworkPolicy, Subject: "self", Rules: []policymodel.Rule{{
		ID: "mnp/t/in/ingress/0", Action: policymodel.Allow, Clauses: []policymodel.Clause{{
			Peer: "peer", Ports: []policymodel.PortRange{{Proto: policymodel.TCP, First: 5555, Last: 5555}},
		}},
	}}}
	p := &nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1",
		Ingress: nft.PodDir{Isolated: true, Policies: []*policymodel.Policy{allow}},
		Egress:  nft.PodDir{Isolated: true},
		Sets:    []*policymodel.Set{peer}}}}
	apply := func(step string, wantTx uint64) {
		t.Helper()
		before := nft.Transactions()
		must(t, h.ApplyPodPolicy(p))
		if n := nft.Transactions() - before; n != wantTx {
			t.Errorf("%s: %d transactions, want %d", step, n, wantTx)
		}
	}
	apply("first", 1)
	apply("again", 0)
	c := connOf(t, k)
	table := &nftables.Table{Name: nft.MultiTable, Family: nftables.TableFamilyINet}
	count := func() int {
		n, err := h.RuleCount(table)
		must(t, err)
		return n
	}
	rules := count()
	for _, tamper := range []struct {
		what string
		do   func()
	}{
		{"input flushed", func() { c.FlushChain(&nftables.Chain{Table: table, Name: "input"}) }},
		{"i0-in4 flushed", func() { c.FlushChain(&nftables.Chain{Table: table, Name: "i0-in4"}) }},
		{"an element deleted", func() {
			must(t, c.SetDeleteElements(&nftables.Set{Table: table, Name: "i0-peer-4", KeyType: nftables.TypeIPAddr},
				[]nftables.SetElement{{Key: netip.MustParseAddr("192.0.2.1").AsSlice()}}))
		}},
	} {
		must(t, c.Flush())
		tamper.do()
		must(t, c.Flush())
		apply(tamper.what, 1)
		apply(tamper.what+", again", 0)
		if n := count(); n != rules {
			t.Errorf("%s: %d rules after the repair, want %d", tamper.what, n, rules)
		}
	}
	if n, err := h.ElemCount(table, "i0-peer-4"); err != nil || n != 1 {
		t.Errorf("the peer set holds %d IPv4 elements after the repairs, %v; want its one", n, err)
	}
}
