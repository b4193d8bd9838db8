package nft_test

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// manyPolicies is a full sync of n NetworkPolicies of one pod, each a
// chain, a rule and a counter: a batch of some thousand messages.
func manyPolicies(n int) *nft.PolicyChange {
	r := &policymodel.Rules{Ingress: policymodel.Tiers{Isolated: "dst"}}
	for i := range n {
		id := fmt.Sprintf("np/t/p%d", i)
		r.Ingress.NetworkPolicy = append(r.Ingress.NetworkPolicy, &policymodel.Policy{
			ID: id, Tier: policymodel.TierNetworkPolicy, Subject: "dst",
			Rules: []policymodel.Rule{{ID: policymodel.NewRuleID(id, policymodel.Ingress, 0), Action: policymodel.Allow,
				Clauses: []policymodel.Clause{{Peer: "dst", Ports: []policymodel.PortRange{{Proto: policymodel.TCP, First: uint16(1000 + i), Last: uint16(1000 + i)}}}}}},
		})
	}
	dst4, dst6 := labtest.PodAddrs(1)
	return &nft.PolicyChange{Full: true, Rules: r, Sets: []*policymodel.Set{policymodel.NewSet("dst", policymodel.Addrs, "dst",
		policymodel.AddrElem(dst4.Addr()), policymodel.AddrElem(dst6.Addr()))}}
}

// TestPolicyAcksOverflow: a full sync whose acks overflow the connection's
// receive buffer (ENOBUFS, as a large cluster's did at 8,000 clauses) is
// read from the table, not taken for a failure: the kernel applied the
// batch, so ApplyPolicy succeeds, the table has every policy's counter,
// and the next change on the same Handle (a new connection) works (a
// full sync of the same model sends nothing: one policy more). Issue
// 60, finding 5: the agent took it for a failed transaction and retried
// the same full sync for ever. Since issue 61 the policy table's
// transactions are quiet (one ack each, no echoes: txn_quiet.go), so a
// 4,096-byte buffer no longer overflows: the full sync through it must
// commit all the same (TestPolicyAcksOverflowNotApplied keeps the read
// of an overflow).
func TestPolicyAcksOverflow(t *testing.T) {
	nstest.RequireRoot(t)
	nft.SetPolicyRcvBuf(t, 4096)
	h := openNS(t, "acks").NFT()
	const n = 300
	must(t, h.ApplyPolicy(manyPolicies(n)))
	counters, err := h.PolicyCounters()
	must(t, err)
	for i := range n {
		id := policymodel.NewRuleID(fmt.Sprintf("np/t/p%d", i), policymodel.Ingress, 0)
		if _, ok := counters[policymodel.CounterName(id.Key())]; !ok {
			t.Fatalf("no counter of %s after the full sync", id)
		}
	}
	gen := h.PolicyGen()
	must(t, h.ApplyPolicy(manyPolicies(n+1))) // one policy more: a transaction
	if h.PolicyGen() == gen {
		t.Errorf("a second full sync left the generation at %d", gen)
	}
}

// TestPolicyAcksOverflowNotApplied: when the table does not hold the
// generation the overflowed transaction wrote, it was not applied, and the
// ENOBUFS is the error.
func TestPolicyAcksOverflowNotApplied(t *testing.T) {
	nstest.RequireRoot(t)
	h := openNS(t, "acks").NFT()
	must(t, h.ApplyPolicy(manyPolicies(2)))
	gen := h.PolicyGen()
	overflow := fmt.Errorf("receive acks: %w", unix.ENOBUFS)
	err := h.CommittedDespite(gen+1, overflow)
	if !errors.Is(err, unix.ENOBUFS) {
		t.Fatalf("CommittedDespite(another generation) = %v, want the ENOBUFS", err)
	}
	if err := h.CommittedDespite(gen, overflow); err != nil {
		t.Errorf("CommittedDespite(the table's generation) = %v, want nil", err)
	}
}

// TestPolicyAcksOverflowChunked: a full sync cut into several
// transactions whose acks each overflow the receive buffer: each is read
// from the table, and the next goes on the new socket with its buffers
// raised again (a first version sent it with the default send buffer,
// which refused it: EMSGSIZE).
func TestPolicyAcksOverflowChunked(t *testing.T) {
	nstest.RequireRoot(t)
	nft.SetPolicyRcvBuf(t, 4096)
	nft.SetPolicyChunkMsgs(t, 2000)
	h := openNS(t, "acksc").NFT()
	const n = 300
	before := nft.Transactions()
	must(t, h.ApplyPolicy(manyPolicies(n)))
	if got := nft.Transactions() - before; got < 2 {
		t.Errorf("%d transactions, want the full sync cut in several", got)
	}
	counters, err := h.PolicyCounters()
	must(t, err)
	for i := range n {
		id := policymodel.NewRuleID(fmt.Sprintf("np/t/p%d", i), policymodel.Ingress, 0)
		if _, ok := counters[policymodel.CounterName(id.Key())]; !ok {
			t.Fatalf("no counter of %s after the full sync", id)
		}
	}
}
