package nft_test

import (
	"testing"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// BenchmarkPolicyFullSyncCap: the policy table's full sync through the
// core at twice the node's clause cap, in a namespace of its own: 8,000
// NetworkPolicies of one rule each, which the renderer makes 32,000
// chains of 72,000 rules (manyPolicies). "unchanged": the model the
// table holds (nothing sent); "one-changed": policy 0's port moved at
// each sync (its chains rewritten, one transaction). The dumps and
// transactions of each sync are reported (nft.RuleDumps, nft.Transactions).
//
//	go test -run '^$' -bench PolicyFullSyncCap -benchtime 3x ./netops/nft
func BenchmarkPolicyFullSyncCap(b *testing.B) {
	h := labtest.OpenNS(b, "pcap").NFT()
	const n = 8000
	model := func(port uint16) *nft.PolicyChange {
		c := manyPolicies(n)
		c.Rules.Ingress.NetworkPolicy[0].Rules[0].Clauses[0].Ports[0] = policymodel.PortRange{Proto: policymodel.TCP, First: port, Last: port}
		return c
	}
	labtest.Must(b, h.ApplyPolicy(model(1000)))
	report := func(b *testing.B, dumps, tx uint64) {
		b.ReportMetric(float64(nft.RuleDumps()-dumps)/float64(b.N), "rule-dumps/op")
		b.ReportMetric(float64(nft.Transactions()-tx)/float64(b.N), "tx/op")
	}
	b.Run("unchanged", func(b *testing.B) {
		c := model(1000)
		dumps, tx := nft.RuleDumps(), nft.Transactions()
		for b.Loop() {
			labtest.Must(b, h.ApplyPolicy(c))
		}
		report(b, dumps, tx)
	})
	b.Run("one-changed", func(b *testing.B) {
		cs := []*nft.PolicyChange{model(1000), model(65000)}
		dumps, tx := nft.RuleDumps(), nft.Transactions()
		i := 0
		for b.Loop() {
			i++
			labtest.Must(b, h.ApplyPolicy(cs[i%2]))
		}
		report(b, dumps, tx)
	})
}
