package nft

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The policy table's full sync (PolicyChange.Full: the agent's first
// sync, its periodic resync, the sync after a failure) goes through the
// core (core.go): the whole table is rendered as a tableSpec, the
// kernel's is dumped (its chains and rules, sets and elements, counters),
// and only the difference is sent. So a full sync of an unchanged model
// sends nothing (the verdict cache's generation stays: no verdict
// changed), one after a policy changed touches that policy's chains,
// sets and counters (and the jumps to them), and one after someone
// changed the table puts back what they changed.
//
// A large difference (a new node's first sync, a table an older cnibox
// rendered, one that was flushed) is not one unbounded batch: the core's
// plan (core_plan.go) orders it so that the table is whole after any
// step (objects, empty chains, elements, each chain's rules, then what
// goes), and it is cut into transactions of at most policyChunk
// estimated bytes, each taking a new generation (so the verdict cache
// judges every connection again after it) and resetting the fast path,
// as every change of the table does. Between two of them the table
// judges by whole chains, some already new, others not yet: as the
// policies would between two of the agent's deltas. A table that must be
// replaced whole (one of its sets of another type, which only someone
// else makes) is one transaction, with what its pending and attached sets
// held.
//
// The pending set: the model's addresses (Resolved) leave it in the last
// step, once their sets and rules are in; the addresses the model lost
// (ToPending) and those attached that it does not place enter it in the
// first transaction, right after the sets are made; those then not
// attached leave it after the commit (releaseUnattached). The guard set's
// elements change in that first transaction too, which makes every set
// and counter the table lacks (a CNI ADD that finds the table finds its
// guard, pending and attached sets: MarkPolicyPending).

// policyChunk and policyChunkMsgs bound a full sync's transactions: the
// core's estimate of their bytes, well below policySndBuf, and their
// messages, each of which the kernel acks: 8,192 acks fit the receive
// buffer (policyRcvBuf: ~1 KiB each as the kernel counts them), so a
// transaction's acks overflow it only when one step is that large (a
// chain of thousands of rules; then committedDespite reads the table).
var (
	policyChunk     = 4 << 20
	policyChunkMsgs = 8192
)

// syncPolicy is a full sync (see above).
func (h *Handle) syncPolicy(c *PolicyChange) error {
	if err := checkPolicyRules(c.Rules); err != nil {
		return err
	}
	if _, err := h.nftConn(); err != nil {
		return err
	}
	pt := policyOf(h)
	pc, counters := renderPolicyFull(c.Rules)
	fps := fingerprints(pc)
	spec := policySpec(c, pc, counters, fps)
	spec.audit = pt.policyAudit()
	spec.once = true // each chain's rules dropped once queued: a transaction sent keeps none
	have, err := h.dumpTable(spec)
	if err != nil {
		pt.forget()
		return fmt.Errorf("list the policy table: %w", err)
	}
	pend, err := h.pendingOf(c, have.exists)
	if err == nil {
		err = h.guardOf(c, have, pend)
	}
	if err != nil {
		pt.forget()
		return err
	}
	if have.exists && spec.mustReplace(have) {
		// Dropped and made again: the kept sets keep what they held.
		for i, ss := range spec.sets {
			switch ss.set.Name {
			case policySetName(PolicyPending, false), policySetName(PolicyPending, true):
				spec.sets[i].elems = pend.pending.elems(ss.set.Name)
			case policySetName(PolicyAttached, false), policySetName(PolicyAttached, true):
				spec.sets[i].elems = pend.attached.elems(ss.set.Name)
			}
		}
	}
	genWhole, err := h.readGenWhole()
	if err != nil {
		pt.forget()
		return err
	}
	p := spec.plan(have)
	pend.queue(p)
	chunks := p.chunks(policyChunk, policyChunkMsgs)
	if len(chunks) == 0 && have.exists && !genWhole {
		chunks = [][]coreStep{nil} // the verdict cache's sets are not whole: a generation is written
	}
	for i, steps := range chunks {
		chunks[i] = nil // the steps die with their transaction, and what they hold
		// Each time: an overflow of the last one's acks opened another
		// socket (committedDespite).
		if err := h.bigBatches(); err != nil {
			pt.forget()
			return err
		}
		h.quiet = policyTableObj() // one ack a transaction, no echoes (policy_apply.go)
		t := &policyTxn{txn: h.tx(), pt: pt}
		h.quiet = nil
		err := func() error {
			for _, st := range steps {
				if err := st.queue(t.txn); err != nil {
					return err
				}
			}
			if err := t.queueGen(); err != nil {
				return err
			}
			_, err := t.queueFastPathReset()
			return err
		}()
		if err != nil {
			t.abort()
			pt.forget()
			return err
		}
		if err := t.commitPolicy(); err != nil {
			pt.forget() // what the steps before it committed is the kernel's
			return err
		}
		pt.gen = t.gen
	}
	pt.setFP(fps)
	pt.objs = specObjs(spec)
	pt.audits++ // the next slice (policy_marks.go)
	if len(pend.closed) > 0 {
		if err := h.releaseUnattached(pend.closed); err != nil {
			return fmt.Errorf("release closed addresses: %w", err)
		}
	}
	return nil
}

// policySpec is the policy table as c says (its rules rendered as pc,
// with counters; fps their fingerprints, which make the chains' marks).
func policySpec(c *PolicyChange, pc *policyChains, counters []string, fps map[string]chainFP) *tableSpec {
	tb := policyTableObj()
	s := &tableSpec{table: tb, owned: true, what: "the policy table"}
	slices.Sort(counters)
	s.counters = slices.Compact(counters)
	kept := func(set *nftables.Set) { s.sets = append(s.sets, setSpec{set: set, kept: true}) }
	s.marks = policyMarksObj()
	kept(s.marks) // its elements: each chain's, written with it (core_marks.go)
	// First: the pending set (and the attached set beside it), so that
	// the first steps make them (pendingChange).
	for _, v6 := range []bool{false, true} {
		kept(policySetObj(PolicyPending, policymodel.Addrs, "pods the agent has not resolved: dropped", v6))
		kept(policySetObj(PolicyAttached, policymodel.Addrs, "pods between their CNI ADD and DEL", v6))
	}
	for _, n := range policyGenSets {
		kept(policyGenObj(n)) // their elements: each transaction's generation
	}
	if logOn(c.Rules.Log) {
		for _, set := range policyLogSets() {
			kept(set) // the meters' elements are the kernel's
		}
	}
	if c.Guard != nil {
		kept(policyGuardObj()) // its elements: pendingChange, in the first transaction
	}
	for _, set := range c.Sets {
		var cidrs [2][]nftables.SetElement
		var lazy [2]*lazyElems
		switch set.Kind {
		case policymodel.CIDRs: // intervals: made of all the prefixes at once
			cidrs[0], cidrs[1] = policyElems(set.Kind, set.Elems())
		case policymodel.Pairs:
		default:
			lazy[0], lazy[1] = lazyPolicyElems(set)
		}
		for i, v6 := range []bool{false, true} {
			obj := policySetObj(string(set.ID), set.Kind, policyComment(set.Key), v6)
			switch set.Kind {
			case policymodel.Pairs:
				kept(obj) // its elements are the DNS proxy's
			case policymodel.CIDRs:
				s.sets = append(s.sets, setSpec{set: obj, elems: cidrs[i]})
			default: // made from the model's set as they are queued
				s.sets = append(s.sets, setSpec{set: obj, lazy: lazy[i]})
			}
		}
	}
	s.chains = slices.Grow(s.chains, len(pc.names)+len(policyBaseChains))
	for _, n := range pc.names {
		cs := chainSpec{name: n, mark: chainMark(n, fps[n])}
		if t, ok := pc.twins[n]; ok && pc.lazyTwins {
			cs.lazy = twinLazy(pc.rules[t.chain], t.v6) // its rules made as it is queued
		} else {
			cs.rules = ruleList(pc.rules[n])
		}
		s.chains = append(s.chains, cs)
	}
	for _, b := range policyBaseChains {
		s.chains = append(s.chains, baseChain(b.name, nftables.ChainTypeFilter, b.hook, b.prio, ruleList(baseRules(b.to))))
	}
	return s
}

// lazyPolicyElems are the elements of each family of set, an address
// set (Addrs, Ported), made as they are queued: the model holds them
// already, and a full sync keeps no second copy of every set. Its sorted
// elements hold the family's in a row (netip sorts IPv4 before IPv6).
func lazyPolicyElems(set *policymodel.Set) (v4, v6 *lazyElems) {
	all := set.Elems()
	n4, _ := slices.BinarySearchFunc(all, true, func(e policymodel.Elem, _ bool) int {
		if e.Prefix.Addr().Is6() {
			return 1
		}
		return -1
	})
	ported := set.Kind == policymodel.Ported
	family := func(off, n int) *lazyElems {
		l := &lazyElems{n: n}
		if n > 0 {
			l.size = n * (elemSize + len(policyElemKey(all[off], ported)))
		}
		l.make = func(lo, hi int) []nftables.SetElement {
			all := set.Elems() // the same, in the same order
			part := all[min(off+lo, len(all)):min(off+hi, off+n, len(all))]
			out := make([]nftables.SetElement, len(part))
			for i, e := range part {
				out[i].Key = policyElemKey(e, ported)
			}
			return out
		}
		return l
	}
	return family(0, n4), family(n4, len(all)-n4)
}

// specObjs are the chains, sets and counters of s, by name.
func specObjs(s *tableSpec) *policyObjs {
	o := newPolicyObjs()
	for _, cs := range s.chains {
		o.chains[cs.name] = true
	}
	for _, ss := range s.sets {
		o.sets[ss.set.Name] = true
	}
	for _, n := range s.counters {
		o.counters[n] = true
	}
	return o
}

// pendingChange is what a full sync does with the pending set (and the
// guard set).
type pendingChange struct {
	pending, attached addrSet
	closed            []netip.Addr // into the pending set, then released if not attached
	add, gone         []netip.Addr // added to and taken out of the pending set
	guard             *PolicyGuard // the guard set's new elements (nil: as it is)
}

// guardOf reads the guard set's elements (when it is there) and notes in
// pc c's guard if they differ from it.
func (h *Handle) guardOf(c *PolicyChange, have *tableState, pc *pendingChange) error {
	if c.Guard == nil {
		return nil // no guard: the set goes with what the spec does not name
	}
	want := map[string]bool{}
	if c.Guard.All {
		want[string(guardKey(""))] = true
	}
	for _, ns := range c.Guard.Namespaces {
		want[string(guardKey(ns))] = true
	}
	var elems []nftElem
	if _, ok := have.sets[policyGuardSet]; ok {
		var err error
		if elems, err = h.dumpElems(PolicyTable, policyGuardSet); err != nil {
			return err
		}
	}
	same := len(elems) == len(want)
	for _, e := range elems {
		same = same && want[string(e.key)]
	}
	if !same {
		pc.guard = c.Guard
	}
	return nil
}

// addrSet is the addresses of an address set's two family parts.
type addrSet map[netip.Addr]bool

// elems are the elements of a's addresses of set's family (set: its
// nftables name, "-4" or "-6").
func (a addrSet) elems(set string) []nftables.SetElement {
	v6 := set[len(set)-1] == '6'
	var out []netip.Addr
	for x := range a {
		if x.Is6() == v6 {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	v4e, v6e := policyElems(policymodel.Addrs, addrElems(out))
	if v6 {
		return v6e
	}
	return v4e
}

// pendingOf reads the pending and attached sets (when the table exists)
// and says what c does with the pending set: Resolved out, ToPending and
// the attached addresses c does not resolve in (those not there yet).
func (h *Handle) pendingOf(c *PolicyChange, exists bool) (*pendingChange, error) {
	pc := &pendingChange{pending: addrSet{}, attached: addrSet{}}
	if exists {
		for _, v6 := range []bool{false, true} {
			p, err := h.policyAddrs(PolicyPending, v6)
			if err != nil {
				return nil, err
			}
			a, err := h.policyAddrs(PolicyAttached, v6)
			if err != nil {
				return nil, err
			}
			for x := range p {
				pc.pending[x] = true
			}
			for x := range a {
				pc.attached[x] = true
			}
		}
	}
	resolved := map[netip.Addr]bool{}
	for _, a := range c.Resolved {
		if !resolved[a] && pc.pending[a] {
			pc.gone = append(pc.gone, a)
		}
		resolved[a] = true
	}
	attached := make([]netip.Addr, 0, len(pc.attached))
	for a := range pc.attached {
		attached = append(attached, a)
	}
	slices.SortFunc(attached, netip.Addr.Compare)
	for _, a := range append(slices.Clone(c.ToPending), attached...) {
		if !resolved[a] {
			resolved[a] = true // once
			pc.closed = append(pc.closed, a)
			if !pc.pending[a] {
				pc.add = append(pc.add, a)
			}
		}
	}
	return pc, nil
}

// queue puts the pending set's changes into p: the closed addresses in
// right after the sets are made (before the elements and rules that take
// them out of the model's sets), the resolved ones out at the end (once
// their sets and rules are in).
func (pc *pendingChange) queue(p *corePlan) {
	change := func(addrs []netip.Addr, add bool) coreStep {
		elems := addrElems(addrs)
		return coreStep{size: len(addrs) * (elemSize + 16), msgs: 2, queue: func(t *txn) error {
			return t.policyElemChange(PolicyPending, policymodel.Addrs, elems, add)
		}}
	}
	var first []coreStep
	if g := pc.guard; g != nil {
		first = append(first, coreStep{size: (len(g.Namespaces) + 1) * (elemSize + 16), msgs: 3, queue: func(t *txn) error { return t.queueGuard(g) }})
	}
	if len(pc.add) > 0 {
		first = append(first, change(pc.add, true))
	}
	p.steps = slices.Insert(p.steps, p.objects, first...)
	p.head = p.objects + len(first)
	if len(pc.gone) > 0 {
		p.steps = append(p.steps, change(pc.gone, false))
	}
}
