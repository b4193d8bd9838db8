package nft

import (
	"testing"

	"github.com/google/nftables"
)

// SetPolicyRcvBuf sets the policy table's receive buffer (for the acks)
// for the Handles that raise theirs until t ends.
func SetPolicyRcvBuf(t testing.TB, n int) {
	old := policyRcvBuf
	policyRcvBuf = n
	t.Cleanup(func() { policyRcvBuf = old })
}

// CommittedDespite is Handle.committedDespite.
func (h *Handle) CommittedDespite(gen uint32, err error) error { return h.committedDespite(gen, err) }

// PolicyGen is the table's generation as the Handle knows it.
func (h *Handle) PolicyGen() uint32 { return policyOf(h).gen }

// SetLogRates sets the flow log meters' rates (per source and rule, and
// the node's; policy_logmeter.go) for the tables rendered until t ends.
func SetLogRates(t testing.TB, perSource, node uint64) {
	oldSrc, oldNode := logSourceRate, logNodeRate
	logSourceRate, logNodeRate = perSource, node
	t.Cleanup(func() { logSourceRate, logNodeRate = oldSrc, oldNode })
}

// RuleCount is how many rules table holds (the core's dump: it reads
// rules google/nftables' GetRules cannot).
func (h *Handle) RuleCount(table *nftables.Table) (int, error) {
	if _, err := h.nftConn(); err != nil {
		return 0, err
	}
	rules, err := h.dumpRules(table, "")
	n := 0
	for _, rs := range rules {
		n += len(rs)
	}
	return n, err
}

// ElemCount is how many elements set of table holds.
func (h *Handle) ElemCount(table *nftables.Table, set string) (int, error) {
	if _, err := h.nftConn(); err != nil {
		return 0, err
	}
	elems, err := h.dumpFamilyElems(table.Family, table.Name, set)
	return len(elems), err
}

// SetPolicyChunk bounds the policy table's full sync transactions to n
// estimated bytes until t ends.
func SetPolicyChunk(t testing.TB, n int) {
	old := policyChunk
	policyChunk = n
	t.Cleanup(func() { policyChunk = old })
}

// SetPolicyChunkMsgs bounds the policy table's full sync transactions to
// n messages until t ends.
func SetPolicyChunkMsgs(t testing.TB, n int) {
	old := policyChunkMsgs
	policyChunkMsgs = n
	t.Cleanup(func() { policyChunkMsgs = old })
}

// RuleDumps is how many dumps of rules this process has asked for.
func RuleDumps() uint64 { return ruleDumps.Load() }

// PolicyAuditSlices is policyAuditSlices: a rule replaced in a marked
// chain is put back within that many full syncs.
const PolicyAuditSlices = policyAuditSlices

// ChainRules are the rules of chain of table as the full sync reads them.
func (h *Handle) ChainRules(table *nftables.Table, chain string) ([]*nftables.Rule, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	rs, err := h.dumpRules(table, chain)
	return rs[chain], err
}
