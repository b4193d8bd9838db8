package nft

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
)

// The core's plan: what makes the kernel's table (a tableState) the
// spec's, as steps in an order after any of which the table is whole, so
// that a caller may commit them in several transactions (the policy
// table's full sync, policy_full.go) as well as in one (reconcile):
//
//  A. the table, the missing sets (empty), counters and flowtables:
//     nothing refers to them yet;
//  B. the missing chains, made empty: nothing jumps to them yet (a base
//     chain made empty accepts, as its hook did without it);
//  C. the elements added to the sets (an interval set's, or a map whose
//     values changed, flushed and filled again in one step): before any
//     rule that comes with them looks them up, after the chains a verdict
//     map's elements jump to;
//  D. each chain's rules, one chain a step (flushed and filled, so no
//     packet meets it half written): the new regular chains, then the
//     regular chains whose rules differ, then the base chains, so a jump
//     becomes live only once its target holds its rules; then the rules
//     appended to others' chains;
//  D'. the elements deleted from the sets: after the rules, so that
//     between two transactions a set holds what the old rules and the new
//     ones look for (a pod leaving one set for another is in both a
//     while, never in neither), and before E (a verdict map's element may
//     jump to a chain that goes);
//  E. the chains the spec does not name, all flushed before any is
//     deleted (one may jump to another), and the verdict maps it does not
//     name flushed too (an element may jump to one), after D, which took
//     every jump to them away;
//  F. the counters, sets and flowtables the spec does not name, after the
//     rules that used them.
//
// A table replaced whole (a set of another type, a flowtable on other
// devices: mustReplace) is dropped in the first step; then the plan is
// whole: its steps go in one transaction, or the table would be open
// between them.

// coreStep is one piece of a reconcile's transaction.
type coreStep struct {
	size  int // the estimated bytes of its messages
	msgs  int // how many messages it queues (each gets its ack)
	queue func(t *txn) error
}

// corePlan is the steps that make the kernel's table the spec's.
type corePlan struct {
	steps   []coreStep
	changes int  // what reconcile reports: 0 when the table is the spec's
	whole   bool // the table is replaced: one transaction
	// objects: the number of steps up to the end of A (a caller's step
	// that needs the sets goes there).
	objects int
	// head: the number of first steps that go in the first transaction
	// whatever their size (0: none must).
	head int
	// late: the element adds of sets with setSpec.late, queued after the
	// chains' rules.
	late []coreStep
}

// The estimated sizes of the messages (for chunks, not for the kernel).
const (
	objSize  = 96   // a table, chain, set, counter or flowtable, its add or delete
	ruleSize = 64   // a rule, without its expressions
	exprSize = 48   // an expression
	elemSize = 32   // an element, without its key and data
	elemStep = 4096 // elements of one set a step (but an interval set's)
)

// add adds a step of msgs messages of size bytes (estimated).
func (p *corePlan) add(msgs, size int, f func(t *txn) error) {
	p.steps = append(p.steps, coreStep{size: size, msgs: msgs, queue: f})
}

// plan makes the plan of s over have (see above).
func (s *tableSpec) plan(have *tableState) *corePlan {
	p := &corePlan{}
	if have.exists && s.owned && s.mustReplace(have) {
		p.add(1, objSize, func(t *txn) error { dropTable(t.conn(), s.table); return nil })
		have, p.changes, p.whole = &tableState{}, 1, true
	}
	if !have.exists {
		p.add(1, objSize, func(t *txn) error { t.conn().AddTable(s.table); return nil })
		p.changes++
	}
	s.planObjects(p, have)
	p.objects = len(p.steps)
	// The steps hold the spec's chains by pointer (a copy of each, in each
	// closure, was a tenth of a policy full sync's heap).
	var newRegular, newBase, differ, differBase []*chainSpec
	var appends, marks []coreStep
	for i := range s.chains {
		cs := &s.chains[i]
		hc, ok := have.chains[cs.name]
		same := cs.same
		if same == nil {
			same = sameRule
		}
		switch {
		case cs.appendOnly:
			if !ok {
				p.add(1, objSize, func(t *txn) error { cs.add(t, s.table); return nil })
			}
			var rules []*nftables.Rule
			for _, r := range cs.rules {
				if !slices.ContainsFunc(have.rules[cs.name], func(hr *nftables.Rule) bool { return same(hr, r) }) {
					rules = append(rules, r)
				}
			}
			if !ok || len(rules) > 0 {
				p.changes++
			}
			if len(rules) > 0 {
				appends = append(appends, coreStep{size: rulesSize(rules), msgs: len(rules), queue: func(t *txn) error {
					ch := &nftables.Chain{Name: cs.name, Table: s.table}
					for _, r := range rules {
						r.Table, r.Chain = s.table, ch
						t.conn().AddRule(r)
					}
					return nil
				}})
			}
			continue
		case !ok:
			p.add(1, objSize, func(t *txn) error { cs.add(t, s.table); return nil })
			if cs.hook != nil {
				newBase = append(newBase, cs)
			} else {
				newRegular = append(newRegular, cs)
			}
		case !cs.sameChain(hc):
			cs := *cs // the spec's own stays as it is
			cs.replace = true
			differBase = append(differBase, &cs)
		case have.marked(cs):
			continue
		case slices.EqualFunc(have.rules[cs.name], cs.ruleSet(), same):
			if s.marks != nil && cs.mark != nil && cs.hook == nil && !have.hasMark(cs) {
				// Equal, without its mark: given it (core_marks.go; a
				// chain with its mark and another use count, some jump
				// the spec does not know, is dumped at each sync).
				marks = append(marks, coreStep{size: 2 * objSize, msgs: 2, queue: func(t *txn) error { return s.queueMark(t, cs, have) }})
				p.changes++
			}
			continue
		case cs.hook != nil:
			differBase = append(differBase, cs)
		default:
			differ = append(differ, cs)
		}
		p.changes++
	}
	var dels []coreStep
	for _, ss := range s.sets {
		d, n := ss.plan(p, have)
		dels = append(dels, d...)
		p.changes += n
	}
	for i, group := range [][]*chainSpec{newRegular, differ, newBase, differBase} {
		made := i%2 == 0 // the new chains, made in B
		for _, cs := range group {
			n, size := cs.ruleCount()
			msgs, size := 3+n, objSize+size
			if s.marks != nil && cs.mark != nil {
				msgs, size = msgs+2, size+2*objSize // its marks
			}
			p.add(msgs, size, func(t *txn) error {
				cs.fill(t, s.table, made)
				if s.once {
					cs.rules, cs.lazy = nil, nil // queued: its messages hold them now
				}
				return s.queueMark(t, cs, have) // in the same step: the mark tells what the chain holds
			})
		}
	}
	p.steps = append(p.steps, p.late...)
	p.steps = append(p.steps, appends...)
	p.steps = append(p.steps, marks...)
	p.steps = append(p.steps, dels...)
	s.planExtra(p, have)
	if stale := s.staleMarks(have); len(stale) > 0 {
		for len(stale) > 0 {
			part := stale[:min(elemStep, len(stale))]
			stale = stale[len(part):]
			p.add(1, elemsSize(part), func(t *txn) error {
				for _, c := range chunkElems(part) { // messages under 64 KiB (txn.go)
					if err := t.conn().SetDeleteElements(s.marks, c); err != nil {
						return err
					}
				}
				return nil
			})
		}
		p.changes++
	}
	return p
}

// planObjects plans step A: the missing sets, counters and flowtables.
func (s *tableSpec) planObjects(p *corePlan, have *tableState) {
	for _, ss := range s.sets {
		ss.set.Table = s.table
		if _, ok := have.sets[ss.set.Name]; !ok {
			p.add(1, objSize, func(t *txn) error {
				if err := t.addSet(ss.set, nil); err != nil {
					return fmt.Errorf("set %s: %w", ss.set.Name, err)
				}
				return nil
			})
			p.changes++
		}
	}
	for _, name := range s.counters {
		if !have.counters[name] {
			p.add(1, objSize, func(t *txn) error {
				t.conn().AddObj(&nftables.CounterObj{Table: s.table, Name: name})
				return nil
			})
			p.changes++
		}
	}
	for _, ft := range s.flowtables {
		if _, ok := have.flowtables[ft.Name]; !ok {
			p.add(1, objSize, func(t *txn) error { ft.Table = s.table; t.conn().AddFlowtable(ft); return nil })
			p.changes++
		}
	}
}

// planExtra plans steps E and F: what the spec does not name, in a table
// it owns, deleted.
func (s *tableSpec) planExtra(p *corePlan, have *tableState) {
	if !s.owned {
		return
	}
	named := make(map[string]bool, len(s.chains)+len(s.sets)+len(s.counters))
	for _, cs := range s.chains {
		named["chain "+cs.name] = true
	}
	for _, ss := range s.sets {
		named["set "+ss.set.Name] = true
	}
	for _, name := range s.counters {
		named["counter "+name] = true
	}
	var extra []string
	for _, name := range sortedKeys(have.chains) {
		if !named["chain "+name] {
			extra = append(extra, name)
		}
	}
	for _, name := range extra {
		p.add(1, objSize, func(t *txn) error {
			t.conn().FlushChain(&nftables.Chain{Name: name, Table: s.table})
			return nil
		})
	}
	// A verdict map the spec does not name may jump to them: it is
	// flushed before they go (deleted in F).
	for _, name := range sortedKeys(have.sets) {
		if hs := have.sets[name]; len(extra) > 0 && !named["set "+name] && isVerdictMap(hs) {
			p.add(1, objSize, func(t *txn) error {
				t.conn().FlushSet(&nftables.Set{Name: name, Table: s.table})
				return nil
			})
		}
	}
	for _, name := range extra {
		p.add(1, objSize, func(t *txn) error {
			t.conn().DelChain(&nftables.Chain{Name: name, Table: s.table})
			return nil
		})
		p.changes++
	}
	if s.counters != nil {
		for _, name := range sortedKeys(have.counters) {
			if !named["counter "+name] {
				p.add(1, objSize, func(t *txn) error {
					t.conn().DeleteObject(&nftables.CounterObj{Table: s.table, Name: name})
					return nil
				})
				p.changes++
			}
		}
	}
	for _, name := range sortedKeys(have.sets) {
		if !named["set "+name] {
			p.add(1, objSize, func(t *txn) error { t.conn().DelSet(&nftables.Set{Name: name, Table: s.table}); return nil })
			p.changes++
		}
	}
	for _, name := range sortedKeys(have.flowtables) {
		if !slices.ContainsFunc(s.flowtables, func(ft *nftables.Flowtable) bool { return ft.Name == name }) {
			p.add(1, objSize, func(t *txn) error {
				t.conn().DelFlowtable(&nftables.Flowtable{Name: name, Table: s.table})
				return nil
			})
			p.changes++
		}
	}
}

// isVerdictMap reports whether a set read back from the kernel is a
// verdict map (google/nftables reads a verdict map's data type into its
// KeyType, and leaves DataType empty).
func isVerdictMap(s *nftables.Set) bool {
	return s.IsMap && (s.DataType.Name == nftables.TypeVerdict.Name || s.KeyType.Name == nftables.TypeVerdict.Name)
}

// plan plans what makes the set (made, if it was not in have: step A)
// hold ss's elements: the additions, or the set flushed and filled again,
// in p (step C), the deletions returned (step D'); and counts the
// changes.
func (ss *setSpec) plan(p *corePlan, have *tableState) (dels []coreStep, changes int) {
	set := ss.set
	elemsOf := func(f func(t *txn, s *nftables.Set, e []nftables.SetElement) error, es []nftables.SetElement) []coreStep {
		n := elemStep
		if set.Interval {
			n = len(es) // the kernel checks the intervals as one whole
		}
		var out []coreStep
		for len(es) > 0 {
			part := es[:min(n, len(es))]
			es = es[len(part):]
			out = append(out, coreStep{size: elemsSize(part), msgs: 1, queue: func(t *txn) error {
				if err := f(t, set, part); err != nil { // (in messages under 64 KiB: txn.go)
					return fmt.Errorf("set %s: %w", set.Name, err)
				}
				return nil
			}})
		}
		return out
	}
	addElems := (*txn).setAddElements
	adds := &p.steps
	if ss.late {
		adds = &p.late
	}
	if _, ok := have.sets[set.Name]; !ok || ss.kept {
		if l := ss.lazy; l != nil && !set.Interval {
			for lo := 0; lo < l.n; lo += elemStep {
				lo, hi := lo, min(lo+elemStep, l.n)
				*adds = append(*adds, coreStep{size: l.size * (hi - lo) / l.n, msgs: 1, queue: func(t *txn) error {
					if err := addElems(t, set, l.make(lo, hi)); err != nil { // (in messages under 64 KiB: txn.go)
						return fmt.Errorf("set %s: %w", set.Name, err)
					}
					return nil
				}})
			}
			return nil, min(l.n, 1)
		}
		elems := ss.elemSet()
		if len(elems) == 0 {
			return nil, 0
		}
		*adds = append(*adds, elemsOf(addElems, elems)...)
		return nil, 1
	}
	elems := ss.elemSet()
	add, del, whole := diffElems(have.elems[set.Name], elems)
	if whole || (set.Interval && len(add)+len(del) > 0) {
		p.add(2, objSize+elemsSize(elems), func(t *txn) error {
			t.conn().FlushSet(set)
			if len(elems) == 0 {
				return nil
			}
			if err := t.setAddElements(set, elems); err != nil {
				return fmt.Errorf("set %s: %w", set.Name, err)
			}
			return nil
		})
		return nil, 1
	}
	*adds = append(*adds, elemsOf(addElems, add)...)
	return elemsOf((*txn).setDeleteElements, del), len(add) + len(del)
}

// fill queues the chain's making unless made (B made it; a chain that is
// there is made again: a no-op but for a base chain's policy), its flush
// (even when just made: two callers racing leave one copy of each rule)
// and its rules; a chain of another kind (replace) is deleted first.
func (cs *chainSpec) fill(t *txn, table *nftables.Table, made bool) {
	if cs.replace {
		t.conn().DelChain(&nftables.Chain{Name: cs.name, Table: table})
	}
	ch := &nftables.Chain{Name: cs.name, Table: table}
	if !made {
		ch = cs.add(t, table)
	}
	t.conn().FlushChain(ch)
	for _, r := range cs.ruleSet() {
		r.Table, r.Chain = table, ch
		t.conn().AddRule(r)
	}
}

// rulesSize is the estimated size of rules' messages.
func rulesSize(rules []*nftables.Rule) int {
	n := 0
	for _, r := range rules {
		n += ruleSize + exprSize*len(r.Exprs) + len(r.UserData)
	}
	return n
}

// elemsSize is the estimated size of elems' message.
func elemsSize(elems []nftables.SetElement) int {
	n := 0
	for _, e := range elems {
		n += elemSize + len(e.Key) + len(e.Val)
	}
	return n
}

// chunks cuts p's steps into transactions of at most max estimated bytes
// and maxMsgs messages each, in order (a step larger goes alone, the
// head's steps together; a whole plan is one transaction, as is every
// plan when max <= 0).
func (p *corePlan) chunks(max, maxMsgs int) [][]coreStep {
	if p.whole || max <= 0 {
		if len(p.steps) == 0 {
			return nil
		}
		return [][]coreStep{p.steps}
	}
	var out [][]coreStep
	var cur []coreStep
	size, msgs := 0, 0
	for i, st := range p.steps {
		if len(cur) > 0 && (size+st.size > max || msgs+st.msgs > maxMsgs) && i >= p.head {
			out = append(out, cur)
			cur, size, msgs = nil, 0, 0
		}
		cur = append(cur, st)
		size += st.size
		msgs += st.msgs
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
