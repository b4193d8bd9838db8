package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// policyState is what the policy table holds now, by name.
type policyState struct {
	exists bool
	*policyObjs
	pending4, pending6 map[netip.Addr]bool
}

// policyObjs are the policy table's chains, sets and counters by name
// (policyTable.objs: what the Handle committed last).
type policyObjs struct {
	chains, sets, counters map[string]bool
}

func newPolicyObjs() *policyObjs {
	return &policyObjs{chains: map[string]bool{}, sets: map[string]bool{}, counters: map[string]bool{}}
}

// readPolicy reads whether the policy table exists and, with objects, its
// chains, sets and counters (those this Handle committed last unless full),
// with pending its pending addresses (an element-only change needs neither
// dump). The transaction updates st.policyObjs to what it leaves.
func (h *Handle) readPolicy(objects, full, withPending bool) (*policyState, error) {
	pt := policyOf(h)
	st := &policyState{policyObjs: newPolicyObjs()}
	if tb, _ := h.nft.ListTableOfFamily(PolicyTable, policyFamily); tb == nil {
		pt.objs = nil
		return st, nil
	}
	st.exists = true
	if withPending {
		var err error
		if st.pending4, err = h.policyAddrs(PolicyPending, false); err != nil {
			return nil, err
		}
		if st.pending6, err = h.policyAddrs(PolicyPending, true); err != nil {
			return nil, err
		}
	}
	if !objects {
		return st, nil
	}
	if pt.objs != nil && !full {
		st.policyObjs = pt.objs
		return st, nil
	}
	chains, err := consistently(h, func() ([]*nftables.Chain, error) { return h.nft.ListChainsOfTableFamily(policyFamily) })
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	for _, c := range chains {
		if c.Table.Name == PolicyTable {
			st.chains[c.Name] = true
		}
	}
	sets, err := consistently(h, func() ([]*nftables.Set, error) { return h.nft.GetSets(policyTableObj()) })
	if err != nil {
		return nil, fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		st.sets[s.Name] = true
	}
	objs, err := consistently(h, func() ([]nftables.Obj, error) { return h.nft.GetObjects(policyTableObj()) })
	if err != nil {
		return nil, fmt.Errorf("list counters: %w", err)
	}
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok {
			st.counters[c.Name] = true
		}
	}
	return st, nil
}

// policyAddrs reads the addresses of an address set's family part.
func (h *Handle) policyAddrs(name string, v6 bool) (map[netip.Addr]bool, error) {
	out := map[netip.Addr]bool{}
	elems, err := h.dumpElems(PolicyTable, policySetName(name, v6))
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.key); ok {
			out[a] = true
		}
	}
	return out, nil
}

// applyPolicy applies c: a full sync through the core (policy_full.go),
// else the change c says, on what this Handle knows of the table.
func (h *Handle) applyPolicy(c *PolicyChange) error {
	if c.Full {
		return h.syncPolicy(c)
	}
	// Quiet (txn_quiet.go): one ack for the batch, no echo of each rule.
	// google/nftables asks an ack of every message and an echo of every
	// rule, which the kernel queues and the Handle reads one by one:
	// with the untracked twins (issue 60), as many answers as a policy's
	// delta has messages, twice its rules again (the wait for them 0.85
	// -> 1.82 s of bench-policy's profile). An error is answered all the
	// same, and fails the delta (the syncer then makes a full sync).
	h.quiet = policyTableObj()
	t, err := h.begin() // the transaction keeps its quiet builder
	h.quiet = nil
	if err != nil {
		return err
	}
	pt := policyOf(h)
	objects := c.Rules != nil || len(c.Sets)+len(c.DelSets) > 0
	st, err := h.readPolicy(objects, false, len(c.Resolved) > 0)
	if err != nil {
		return err
	}
	if !st.exists {
		return fmt.Errorf("no policy table (a full sync makes it): %w", ErrNotFound)
	}
	if err := h.readGen(); err != nil {
		return err
	}
	if c.Rules != nil {
		if err := checkPolicyRules(c.Rules); err != nil {
			return err
		}
	}
	if err := h.bigBatches(); err != nil {
		return err
	}
	pt.objs = nil // until the commit: st.policyObjs changes as it is queued
	pxt := &policyTxn{txn: t, pt: pt}
	defer func() {
		if pt.scratch != nil {
			pt.scratch.empty() // queued: its chains are in the messages
		}
	}()
	if err := pxt.queuePolicy(c, st); err != nil {
		t.abort()
		pt.fp, pt.gen = nil, 0
		return err
	}
	if err := pxt.commitPolicy(); err != nil {
		pt.fp, pt.gen = nil, 0 // the kernel's chains are unknown again
		return err
	}
	pt.gen = pxt.gen
	if objects {
		pt.objs = st.policyObjs
	}
	if c.Rules != nil {
		pt.setFP(pxt.fp)
	}
	if len(pxt.closed) > 0 {
		if err := h.releaseUnattached(pxt.closed); err != nil {
			return fmt.Errorf("release closed addresses: %w", err)
		}
	}
	return nil
}

// queuePolicy queues c (not a full sync: policy_full.go) on t, st being
// the table as it is. The kernel
// checks each message of a transaction against what the messages before
// it made, so the steps come in this order:
//
//  1. The table, and the pending and attached sets (a CNI ADD writes to
//     them: they are never deleted, only made if missing).
//  2. If the rules changed: the counters they name that are new, the
//     flow log's meter sets if they log (policy_logmeter.go), then a
//     flush of every chain whose rules this change does not keep (a
//     flushed chain no longer refers to a set or a counter).
//  3. The sets of c.Sets: made, or flushed and refilled if they exist.
//  4. Elements added to and removed from sets that stay (c.Add, c.Del).
//  5. The guard set (the namespaces where a policy could select a pod).
//  6. The pending set: the resolved addresses out, the closed ones in.
//  7. The generation sets (readGen), and the fast path's reset
//     (fastpath.go: a new generation takes every connection out of it).
//  8. The chains and their rules: the chains first, the base chains
//     hooked last (a jump needs its target), chains no rule uses deleted,
//     then the counters no rule uses.
//  9. The sets no rule uses any more (after 2 and 8, which dropped the
//     rules that looked them up), the meter sets where nothing logs.
func (t *policyTxn) queuePolicy(c *PolicyChange, st *policyState) error {
	cc := t.conn()
	tb := cc.AddTable(policyTableObj())
	for _, v6 := range []bool{false, true} {
		if err := t.addSet(policySetObj(PolicyPending, policymodel.Addrs, "pods the agent has not resolved: dropped", v6), nil); err != nil {
			return err
		}
		if err := t.addSet(policySetObj(PolicyAttached, policymodel.Addrs, "pods between their CNI ADD and DEL", v6), nil); err != nil {
			return err
		}
		st.sets[policySetName(PolicyPending, v6)], st.sets[policySetName(PolicyAttached, v6)] = true, true
	}
	var pc *policyChains
	keep := map[string]bool{}
	dels := map[string]bool{} // sets deleted last
	if c.Rules != nil {
		var counters []string
		t.prev = t.pt.fp
		pc, counters = renderPolicyInto(t.pt.scratch, c.Rules, func(chain string, key chainFP) bool {
			return st.chains[chain] && t.prev != nil && t.prev[chain] == key
		}, t.pt.rulesKeys, t.pt.keysSpare, false)
		t.pt.scratch = pc
		t.pt.keysSpare, t.pt.rulesKeys = t.pt.rulesKeys, pc.keysUsed
		for _, n := range counters {
			keep[n] = true
			if !st.counters[n] {
				cc.AddObj(&nftables.CounterObj{Table: tb, Name: n})
				st.counters[n] = true
			}
		}
		if err := t.queueLogSets(c.Rules.Log, st, dels); err != nil {
			return err
		}
		// Chains this Handle wrote as they are now are left alone; the
		// others are flushed (and refilled or deleted below).
		t.fp = fingerprintsInto(pc, t.pt.spareFP())
		for name := range st.chains {
			if !t.policyKeeps(name) {
				cc.FlushChain(&nftables.Chain{Table: tb, Name: name})
				t.unmark(name, st)
			}
		}
		if err := t.queueUnmarks(); err != nil {
			return err
		}
	}
	for _, s := range c.Sets {
		name := string(s.ID)
		if err := t.addPolicySet(s, st.sets[policySetName(name, false)]); err != nil {
			return err
		}
		st.sets[policySetName(name, false)], st.sets[policySetName(name, true)] = true, true
	}
	for _, s := range c.Add {
		if err := t.policyElemChange(string(s.ID), s.Kind, s.Elems(), true); err != nil {
			return err
		}
	}
	for _, s := range c.Del {
		if err := t.policyElemChange(string(s.ID), s.Kind, s.Elems(), false); err != nil {
			return err
		}
	}
	if c.Guard != nil {
		if err := t.queueGuard(c.Guard); err != nil {
			return err
		}
		st.sets[policyGuardSet] = true
	}
	var gone []netip.Addr
	resolved := make(map[netip.Addr]bool, len(c.Resolved))
	for _, a := range c.Resolved {
		resolved[a] = true
		if st.pending4[a] || st.pending6[a] {
			gone = append(gone, a)
		}
	}
	if err := t.policyElemChange(PolicyPending, policymodel.Addrs, addrElems(gone), false); err != nil {
		return err
	}
	for _, a := range c.ToPending {
		if !resolved[a] {
			resolved[a] = true // once
			t.closed = append(t.closed, a)
		}
	}
	if err := t.policyElemChange(PolicyPending, policymodel.Addrs, addrElems(t.closed), true); err != nil {
		return err
	}
	if err := t.queueGen(); err != nil {
		return err
	}
	if _, err := t.queueFastPathReset(); err != nil {
		return err
	}
	for _, n := range policyGenSets {
		st.sets[n] = true
	}
	if pc != nil {
		if err := t.queuePolicyChains(pc, st); err != nil {
			return err
		}
		for n := range st.counters {
			if !keep[n] {
				cc.DeleteObject(&nftables.CounterObj{Table: tb, Name: n})
				delete(st.counters, n)
			}
		}
	}
	for _, n := range c.DelSets {
		dels[policySetName(string(n), false)], dels[policySetName(string(n), true)] = true, true
	}
	for n, del := range dels {
		if del && st.sets[n] {
			cc.DelSet(&nftables.Set{Table: tb, Name: n})
			delete(st.sets, n)
		}
	}
	return nil
}

// queuePolicyChains queues the base chains, the chains and rules of pc,
// and the deletion of the chains no longer used (all were flushed), with
// the marks of the chains it fills (policy_marks.go).
func (t *policyTxn) queuePolicyChains(pc *policyChains, st *policyState) error {
	cc := t.conn()
	tb := policyTableObj()
	want := make(map[string]bool, len(pc.names)+len(policyBaseChains))
	chains := map[string]*nftables.Chain{}
	for _, n := range pc.names {
		want[n] = true
		if !t.policyKeeps(n) || !st.chains[n] {
			chains[n] = cc.AddChain(&nftables.Chain{Table: tb, Name: n})
		}
	}
	// Hooked last: a jump needs its chain made first.
	for _, b := range policyBaseChains {
		want[b.name] = true
		if t.policyKeeps(b.name) && st.chains[b.name] {
			continue
		}
		ch := t.addBaseChain(tb, b.name, nftables.ChainTypeFilter, nftables.ChainHookRef(b.hook), nftables.ChainPriorityRef(b.prio))
		for _, e := range baseRules(b.to) {
			cc.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: e})
		}
	}
	for _, n := range pc.names {
		if chains[n] == nil {
			continue
		}
		pc.twinRules(n) // a twin written: its chain changed
		for _, e := range pc.rules[n] {
			cc.AddRule(&nftables.Rule{Table: tb, Chain: chains[n], Exprs: e})
		}
		t.remark(n, st)
	}
	if err := t.queueRemarks(); err != nil {
		return err
	}
	for n := range st.chains {
		if !want[n] {
			cc.DelChain(&nftables.Chain{Table: tb, Name: n})
			delete(st.chains, n)
		}
	}
	for n := range want {
		st.chains[n] = true
	}
	return nil
}

// policyKeeps reports whether chain name is in the kernel as this change
// wants it (written so by this Handle's last change of the rules).
func (t *policyTxn) policyKeeps(name string) bool {
	if t.prev == nil {
		return false
	}
	old, ok := t.prev[name]
	return ok && old == t.fp[name]
}
