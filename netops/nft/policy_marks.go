package nft

import "github.com/google/nftables"

// The policy table's chain marks (core_marks.go): the full sync gives
// each regular chain a mark made of its fingerprint (fingerprints), so
// that a full sync of an unchanged table at the cap (32,000 chains) reads
// the marks instead of every chain's rules. A delta that rewrites chains
// keeps them true: it deletes the mark of each chain it flushes (that of
// its fingerprint as this Handle last wrote it; the whole set when it
// does not know them, as it then flushes every chain) and adds the mark
// of each chain it fills.
//
// What a mark does not see (a rule someone replaced in place: the chain's
// use count stays) the audit does (core_marks.go): each full sync reads
// the rules of one slice of the marked chains all the same, 1 of
// policyAuditSlices, the next slice at the next full sync; a Handle's
// first full sync reads them all. So a chain someone changed that way is
// put back within policyAuditSlices full syncs (the agent's periodic
// resync) of a Handle, and at the first full sync of a new one.

// policyMarksSet is the policy table's set of chain marks.
const policyMarksSet = "marks"

// policyMarksObj is the policy table's set of chain marks.
func policyMarksObj() *nftables.Set { return markSetObj(policyTableObj(), policyMarksSet) }

// unmark notes, in a delta, the deletion of the mark of chain name,
// which it flushes (see above): queueUnmarks queues them all.
func (t *policyTxn) unmark(name string, st *policyState) {
	if !st.sets[policyMarksSet] {
		return
	}
	if t.prev == nil {
		if !t.marksFlushed {
			t.conn().FlushSet(policyMarksObj())
			t.marksFlushed = true
		}
		return
	}
	if old, ok := t.prev[name]; ok {
		t.unmarks = append(t.unmarks, nftables.SetElement{Key: chainMark(name, old)})
	}
}

// queueUnmarks queues the deletion of the marks unmark noted, in two
// messages whatever their number (one per chain and step was half the
// messages of a policy's delta): added first, so that a mark that is not
// there is no error.
func (t *policyTxn) queueUnmarks() error {
	if len(t.unmarks) == 0 {
		return nil
	}
	if err := t.conn().SetAddElements(policyMarksObj(), t.unmarks); err != nil {
		return err
	}
	return t.conn().SetDeleteElements(policyMarksObj(), t.unmarks)
}

// remark notes, in a delta, the mark of chain name, which it fills:
// queueRemarks queues them all, in one message.
func (t *policyTxn) remark(name string, st *policyState) {
	if fp, ok := t.fp[name]; ok && st.sets[policyMarksSet] {
		t.remarks = append(t.remarks, nftables.SetElement{Key: chainMark(name, fp)})
	}
}

func (t *policyTxn) queueRemarks() error {
	if len(t.remarks) == 0 {
		return nil
	}
	return t.conn().SetAddElements(policyMarksObj(), t.remarks)
}

// policyAuditSlices is the number of slices of the marked chains the
// full syncs read in turn (see above): at the cap (32,000 chains), some
// 2,000 chains' rules at each.
const policyAuditSlices = 16

// policyAudit is the audit of pt's next full sync: all the marked chains
// for the first, then each slice in turn.
func (pt *policyTable) policyAudit() markAudit {
	if pt.audits == 0 {
		return markAudit{slice: 0, of: 1}
	}
	return markAudit{slice: (pt.audits - 1) % policyAuditSlices, of: policyAuditSlices}
}
