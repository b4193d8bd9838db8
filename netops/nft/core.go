package nft

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// The core: the one reconcile every table of cnibox's goes through. A table
// states what it wants in a tableSpec (its chains with their hooks and
// rules, its sets and maps with their elements, its flowtables); reconcile
// dumps what the kernel holds of them (core_dump.go) and queues the
// difference on one transaction (txn.go), which the kernel applies whole or
// not at all:
//
//   - the table, a set, a flowtable or a chain that is missing is added,
//     with its elements or rules;
//   - a chain whose rules differ (one deleted or changed by someone, or a
//     new rendering) is flushed and filled again, in that transaction, so
//     that no packet meets it half written; a chain whose type, hook or
//     priority differ is deleted and added again;
//   - a set whose elements differ gets the missing ones added and the
//     extra ones deleted (an interval set, or a map whose values changed,
//     is flushed and filled again: the kernel then checks the intervals as
//     one whole);
//   - in a table the spec owns whole, what it does not name (a chain, a
//     set, a flowtable someone added) is deleted, and a set of another
//     type or a flowtable with other devices replaces the table (both are
//     referenced by rules, so neither can be swapped alone).
//
// When nothing differs nothing is sent: a second reconcile of the same
// spec costs its dumps and no transaction (TestReconcileIdempotent). This
// is kube-proxy's nftables proxier's shape (desired objects, one
// transaction per sync, chains flushed and refilled) with the dump that
// tailscale's linuxfw does before it adds, so that a table someone
// tampered with is repaired by the next call, not only a missing one.
//
// Elements a table adds and deletes one pod at a time (the masquerade's,
// the fabric's, the DNS table's pods) are not the spec's: such a set is
// kept (setSpec.kept): made when missing, never emptied nor replaced.

// tableSpec is what one table (or, not owned, cnibox's part of a table
// that others share) holds.
type tableSpec struct {
	table *nftables.Table
	// owned: the table is this spec's alone (see above); else only the
	// objects the spec names are reconciled.
	owned      bool
	sets       []setSpec
	flowtables []*nftables.Flowtable
	chains     []chainSpec
	// counters are named counter objects (rules count on them by name,
	// `counter name c-x`); not nil, they are reconciled: the missing ones
	// made before the rules, and in a table the spec owns, those it does
	// not name deleted after the rules that used them. A counter there
	// keeps its values.
	counters []string
	// marks, when not nil, is the table's set of chain marks
	// (core_marks.go), one of sets (kept): a chain with a mark whose mark
	// is in it is not dumped.
	marks *nftables.Set
	// audit picks the marked chains whose rules are read all the same
	// (core_marks.go): none when zero.
	audit markAudit
	// what names the table in errors ("egress", "the fabric rules").
	what string
	// once: the spec is planned once and each step queued once (the
	// policy table's full sync, in several transactions): a chain's step
	// drops its rules once queued, so that the rules of a transaction
	// sent are not kept through the next ones.
	once bool
}

// setSpec is a set or map with its elements.
type setSpec struct {
	set   *nftables.Set
	elems []nftables.SetElement
	// kept: the set's elements are others' (added and deleted one by
	// one): the set is made when missing and is left as it is when
	// there, and elems, if any, are added (an element already there with
	// the same data is no error).
	kept bool
	// late: the elements it lacks are added after the chains' rules, not
	// before. Each rule that looks a map up from another chain makes the
	// kernel walk the map's elements when it binds (checking their data
	// against the rule's registers); an element added later is checked
	// against the map's bindings in a list instead, a fraction of the
	// walk's cost (the services table's slot maps: services_state.go).
	late bool
	// lazy, when set, makes the elements (elems is nil) where they are
	// needed, a step's part at a time, and they die once queued: the
	// policy table's address sets in a full sync, which the model holds
	// already. Its elements hold no verdicts; not for an interval set.
	lazy *lazyElems
}

// lazyElems are a set's n elements made on demand (about size bytes in
// all): make returns those from lo to hi, in an order that stays.
type lazyElems struct {
	n, size int
	make    func(lo, hi int) []nftables.SetElement
}

// elemSet is the set's elements (made, if lazy).
func (ss *setSpec) elemSet() []nftables.SetElement {
	if l := ss.lazy; l != nil {
		return l.make(0, l.n)
	}
	return ss.elems
}

// chainSpec is a chain with its rules (without table and chain: the
// reconcile sets them).
type chainSpec struct {
	name string
	// hook, with typ and prio, makes a base chain (policy accept); nil
	// a regular chain.
	hook  *nftables.ChainHook
	typ   nftables.ChainType
	prio  *nftables.ChainPriority
	rules []*nftables.Rule
	// same, when set, tells a kernel's rule that is want's (else sameRule):
	// rules another program writes (iptables-nft) compared by what they do.
	same func(have, want *nftables.Rule) bool
	// appendOnly: the chain is shared with others (iptables' FORWARD):
	// made when missing, never replaced nor flushed; each rule of the
	// spec's that it lacks is appended.
	appendOnly bool
	// replace (the plan's): the kernel's chain is of another kind, and is
	// deleted before it is made again.
	replace bool
	// mark is the chain's mark (core_marks.go; a regular chain of a spec
	// with a mark set), nil for none: its rules are dumped and compared.
	mark []byte
	// lazy, when set, makes the rules (rules is nil) each time they are
	// needed, and they die once queued: a chain whose rules are a function
	// of another's (the policy table's untracked twins) costs no memory
	// until its step. Not for an appendOnly chain.
	lazy *lazyRules
}

// lazyRules are a chain's rules made on demand: n rules of exprs
// expressions in all (a step's size), made by make.
type lazyRules struct {
	n, exprs int
	make     func() []*nftables.Rule
}

// ruleSet is the chain's rules (made, if lazy).
func (cs *chainSpec) ruleSet() []*nftables.Rule {
	if cs.lazy != nil {
		return cs.lazy.make()
	}
	return cs.rules
}

// ruleCount is the number of the chain's rules, and their estimated size.
func (cs *chainSpec) ruleCount() (n, size int) {
	if l := cs.lazy; l != nil {
		return l.n, ruleSize*l.n + exprSize*l.exprs
	}
	return len(cs.rules), rulesSize(cs.rules)
}

// baseChain is a chainSpec of a base chain.
func baseChain(name string, typ nftables.ChainType, hook nftables.ChainHook, prio nftables.ChainPriority, rules []*nftables.Rule) chainSpec {
	return chainSpec{name: name, typ: typ, hook: nftables.ChainHookRef(hook), prio: nftables.ChainPriorityRef(prio), rules: rules}
}

// reconcile makes the kernel hold specs (one table each), in one
// transaction when something differs; changed reports that one was sent
// (and applied).
func (h *Handle) reconcile(specs ...*tableSpec) (changed bool, err error) {
	if _, err := h.nftConn(); err != nil {
		return false, err
	}
	t := h.tx()
	n := 0
	for _, s := range specs {
		have, err := h.dumpTable(s)
		if err != nil {
			t.abort()
			return false, fmt.Errorf("list %s: %w", s.what, err)
		}
		k, err := s.queue(t, have)
		if err != nil {
			t.abort()
			return false, err
		}
		n += k
	}
	if n == 0 {
		return false, nil
	}
	if err := t.commit(); err != nil {
		return false, err
	}
	return true, nil
}

// write commits specs' chains (each made, flushed and filled) and their
// kept sets' elements in one transaction, without a dump: the caller knows
// that the table and its sets are there (a probe said so). It is
// reconcile for a call that runs on every pod's ADD, where the dumps
// would cost more than the transaction (a chain of the pod's own,
// rewritten anyway: the MAC spoofing check); a transaction that fails
// (what the probe saw went meanwhile, a chain of another kind) leaves
// nothing, and the caller reconciles then.
func (h *Handle) write(specs ...*tableSpec) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	t := h.tx()
	for _, s := range specs {
		have := &tableState{exists: true, sets: map[string]*nftables.Set{}}
		for _, ss := range s.sets {
			have.sets[ss.set.Name] = ss.set
		}
		if _, err := s.queue(t, have); err != nil {
			t.abort()
			return err
		}
	}
	return t.commit()
}

// queue queues on t what makes have (the kernel's) into s, whole, and
// counts the changes (the steps of plan, in its order).
func (s *tableSpec) queue(t *txn, have *tableState) (int, error) {
	p := s.plan(have)
	for _, st := range p.steps {
		if err := st.queue(t); err != nil {
			return 0, err
		}
	}
	return p.changes, nil
}

// mustReplace reports whether an owned table must be replaced whole: one
// of its sets is of another type, or a flowtable hooks other devices.
func (s *tableSpec) mustReplace(have *tableState) bool {
	for _, ss := range s.sets {
		if hs, ok := have.sets[ss.set.Name]; ok && !ss.kept && !sameSetType(hs, ss.set) {
			return true
		}
	}
	for _, ft := range s.flowtables {
		if hf, ok := have.flowtables[ft.Name]; ok && !slices.Equal(sortedCopy(hf.Devices), sortedCopy(ft.Devices)) {
			return true
		}
	}
	return false
}

// add queues the chain's making (a base chain with policy accept).
func (cs *chainSpec) add(t *txn, table *nftables.Table) *nftables.Chain {
	if cs.hook != nil {
		return t.addBaseChain(table, cs.name, cs.typ, cs.hook, cs.prio)
	}
	return t.conn().AddChain(&nftables.Chain{Name: cs.name, Table: table})
}

// sameChain reports whether the kernel's chain hc is a chain of cs's kind:
// both regular, or base chains of the same type, hook and priority.
func (cs *chainSpec) sameChain(hc *nftables.Chain) bool {
	if cs.hook == nil || hc.Hooknum == nil {
		return cs.hook == nil && hc.Hooknum == nil
	}
	return hc.Type == cs.typ && *hc.Hooknum == *cs.hook && hc.Priority != nil && *hc.Priority == *cs.prio
}

// remove deletes what of s the kernel holds (its chains, then its sets;
// the table and others' objects in it stay), in one transaction; nothing
// there sends none.
func (h *Handle) remove(s *tableSpec) error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	have, err := h.dumpTable(s)
	if err != nil {
		return fmt.Errorf("list %s: %w", s.what, err)
	}
	t := h.tx()
	for _, cs := range s.chains {
		if _, ok := have.chains[cs.name]; ok {
			t.conn().FlushChain(&nftables.Chain{Name: cs.name, Table: s.table})
		}
	}
	for _, cs := range s.chains {
		if _, ok := have.chains[cs.name]; ok {
			t.conn().DelChain(&nftables.Chain{Name: cs.name, Table: s.table})
		}
	}
	for _, ss := range s.sets {
		if _, ok := have.sets[ss.set.Name]; ok {
			t.conn().DelSet(&nftables.Set{Name: ss.set.Name, Table: s.table})
		}
	}
	return t.commit()
}

// deleteTable deletes table in one transaction; a missing table is no
// error.
func (h *Handle) deleteTable(table *nftables.Table) error {
	t, err := h.begin()
	if err != nil {
		return err
	}
	dropTable(t.conn(), table)
	if err := t.commit(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// dropTable queues the deletion of table in c after adding it (a no-op
// when it exists, so that a missing table is no error), and returns it.
func dropTable(c *nftables.Conn, table *nftables.Table) *nftables.Table {
	c.AddTable(table)
	c.DelTable(table)
	return table
}
