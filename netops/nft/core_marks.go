package nft

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/google/nftables"
)

// Chain marks: what lets a full sync of a table of tens of thousands of
// chains (the policy table at its cap: 32,000) skip the dump of the rules
// of each chain that is as the spec wants it. Dumping them costs a round
// trip per chain (one dump of the whole table is slower still: the kernel
// walks the table's rules from the first at each ~32 KiB part of a dump),
// and decoding and comparing 72,000 rules; it was most of such a sync.
//
// A spec with a mark set (tableSpec.marks) gives each of its regular
// chains a mark (chainSpec.mark): 16 bytes, the first 8 a hash of the
// chain's name, the last 8 a hash of what its rules are (the table's
// fingerprint of them). The set holds the mark of each chain as it was
// last written: the step that fills a chain (flush and rules) adds the
// chain's mark and deletes its other marks in the same transaction, and
// the table's other writers (the policy table's deltas) delete the mark
// of a chain they rewrite, so a mark in the set always tells what its
// chain holds. A chain whose mark is in the set is taken as equal without
// its rules being read; the others (no mark, another one, a base chain)
// are dumped and compared as before, and a chain found equal that way
// gets its mark (a table an older cnibox wrote: once). Marks of chains
// that went are deleted with what the spec does not name (step F).
//
// A chain's mark is trusted only if the kernel's use count of the chain
// (NFTA_CHAIN_USE: its rules and the jumps to it) is the spec's: a rule
// someone added to or deleted from a marked chain, or its flush, makes it
// dumped and repaired as before. What the count does not see, a rule
// someone replaced by another in a marked chain (`nft replace rule`: the
// count stays), or a chain that another jump to it and one rule fewer
// leave at its count, the audit does: a spec's audit (markAudit) picks a
// slice of the marked chains (by their name's hash) whose rules are read
// and compared all the same, and the table's owner moves it at each full
// sync (the policy table: policy_marks.go), so such a change is repaired
// within as many full syncs as there are slices. cnibox's own writes keep
// the marks true.

// markAudit picks, of a spec's marked chains, those whose rules a full
// sync reads all the same (see above): those whose name's hash is slice
// modulo of; of 1 picks all, of 0 none.
type markAudit struct{ slice, of int }

// picks reports whether a picks the chain of mark.
func (a markAudit) picks(mark []byte) bool {
	return a.of > 0 && len(mark) == markSize && binary.BigEndian.Uint64(mark[:8])%uint64(a.of) == uint64(a.slice)
}

// markSize is a mark's length: an IPv6 address's, the set's key type.
const markSize = 16

// chainFP is a chain's fingerprint: the first 16 bytes of the SHA-256 of
// what its rules are, as text (fpOf). The policy table keeps one per
// chain between changes (policyTable.fp), not the text: at 200 policies
// the text was ~0.6 MB of the agent's live heap, its hash 16 bytes a
// chain. A mark is made of its first 8 bytes, as it was of the text's
// SHA-256 when the table kept the text: the marks in a kernel an earlier
// cnibox wrote stay true.
type chainFP [16]byte

// fpOf is the fingerprint of the text that is parts, one after the other;
// buf (may be nil) is room for it, returned for the next call.
func fpOf(buf []byte, parts ...string) (chainFP, []byte) {
	buf = buf[:0]
	for _, p := range parts {
		buf = append(buf, p...)
	}
	sum := sha256.Sum256(buf)
	return chainFP(sum[:16]), buf
}

// chainMark is the mark of chain name whose rules' fingerprint is fp
// (see above).
func chainMark(name string, fp chainFP) []byte {
	n := sha256.Sum256([]byte(name))
	return append(n[:8:8], fp[:8]...)
}

// markSetObj is a table's set of chain marks.
func markSetObj(table *nftables.Table, name string) *nftables.Set {
	return &nftables.Set{Table: table, Name: name, KeyType: nftables.TypeIP6Addr,
		Comment: "the marks of the chains as cnibox wrote them (a hash of their rules)"}
}

// readMarks fills st.marks from the mark set's elements (when s has a
// mark set and the kernel has it).
func (h *Handle) readMarks(s *tableSpec, st *tableState) error {
	if s.marks == nil {
		return nil
	}
	if _, ok := st.sets[s.marks.Name]; !ok {
		return nil
	}
	elems, err := h.dumpFamilyElems(s.table.Family, s.table.Name, s.marks.Name)
	if err != nil {
		return err
	}
	st.wantUses = s.chainUses()
	st.audit = s.audit
	st.marks = make(map[string][][]byte, len(elems))
	for _, e := range elems {
		if len(e.key) == markSize {
			st.marks[string(e.key[:8])] = append(st.marks[string(e.key[:8])], e.key)
		}
	}
	return nil
}

// marked reports whether the kernel's chain cs is as cs wants it by its
// mark (in the mark set) and its use count (the spec's: as many rules, and
// as many jumps to it), and is not one the audit picks.
func (st *tableState) marked(cs *chainSpec) bool {
	if cs.mark == nil || cs.hook != nil || st.audit.picks(cs.mark) {
		return false
	}
	if u, ok := st.uses[cs.name]; !ok || u != st.wantUses[cs.name] {
		return false
	}
	return st.hasMark(cs)
}

// hasMark reports whether the kernel's mark set holds cs's mark.
func (st *tableState) hasMark(cs *chainSpec) bool {
	for _, m := range st.marks[string(cs.mark[:8])] {
		if string(m) == string(cs.mark) {
			return true
		}
	}
	return false
}

// queueMark queues, in the step that fills cs (or finds it equal), the
// deletion of cs's other marks in the kernel's set and the addition of
// its own.
func (s *tableSpec) queueMark(t *txn, cs *chainSpec, have *tableState) error {
	if s.marks == nil || cs.mark == nil || cs.hook != nil {
		return nil
	}
	var old []nftables.SetElement
	for _, m := range have.marks[string(cs.mark[:8])] {
		if string(m) != string(cs.mark) {
			old = append(old, nftables.SetElement{Key: m})
		}
	}
	c := t.conn()
	if len(old) > 0 {
		if err := c.SetDeleteElements(s.marks, old); err != nil {
			return err
		}
	}
	return c.SetAddElements(s.marks, []nftables.SetElement{{Key: cs.mark}})
}

// staleMarks are the marks in have of no chain of s.
func (s *tableSpec) staleMarks(have *tableState) []nftables.SetElement {
	if s.marks == nil || len(have.marks) == 0 {
		return nil
	}
	named := make(map[string]bool, len(s.chains))
	for _, cs := range s.chains {
		if cs.mark != nil && cs.hook == nil {
			named[string(cs.mark[:8])] = true
		}
	}
	var out []nftables.SetElement
	for _, k := range sortedKeys(have.marks) {
		if !named[k] {
			for _, m := range have.marks[k] {
				out = append(out, nftables.SetElement{Key: m})
			}
		}
	}
	return out
}
