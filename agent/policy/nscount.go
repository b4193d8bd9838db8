package policy

import "github.com/cnibox/cnibox/internal/policymodel"

// nsCount is a namespace's policies added up: the clauses and the sets
// (by how many of them hold each) of all of them (the shape, the same on
// every node) and of those that select a pod of this node (act...: what
// the measure sizes). A rebuild counts what changed since the last one
// (a policy added, replaced or gone, or its subject's first pod here
// come or last gone), not every policy of the namespace again: at
// bench-policy's 200 policies added to one namespace one at a time, the
// namespace was measured again from its policies 200 times.
type nsCount struct {
	policies            map[string]countedPolicy // by ID, as counted
	clauses, actClauses int
	refs, actRefs       map[policymodel.SetID]int
	defs                map[policymodel.SetID]*setDef // of actRefs' sets
}

// countedPolicy is a policy as its namespace's count holds it.
type countedPolicy struct {
	c      *compiled
	active bool
}

func newNSCount() *nsCount {
	return &nsCount{policies: map[string]countedPolicy{}, refs: map[policymodel.SetID]int{},
		actRefs: map[policymodel.SetID]int{}, defs: map[policymodel.SetID]*setDef{}}
}

// count brings namespace ns's count to its policies pcs as they are now,
// active being those that select a pod of this node.
func (c *nsCaps) count(ns string, pcs []*compiled, active map[string]bool) *nsCount {
	n := c.counts[ns]
	if n == nil {
		n = newNSCount()
		c.counts[ns] = n
	}
	for _, pc := range pcs {
		now := countedPolicy{c: pc, active: active[pc.id]}
		was, ok := n.policies[pc.id]
		if ok && was == now {
			continue
		}
		if ok {
			n.tally(was, -1)
		}
		n.tally(now, 1)
		n.policies[pc.id] = now
	}
	if len(n.policies) > len(pcs) { // some are gone (IDs are unique)
		ids := make(map[string]bool, len(pcs))
		for _, pc := range pcs {
			ids[pc.id] = true
		}
		for id, was := range n.policies {
			if !ids[id] {
				n.tally(was, -1)
				delete(n.policies, id)
			}
		}
	}
	return n
}

// tally adds (sign 1) or takes away (-1) policy cp's clauses and sets.
func (n *nsCount) tally(cp countedPolicy, sign int) {
	n.clauses += sign * cp.c.clauses
	for id := range cp.c.defs {
		if n.refs[id] += sign; n.refs[id] == 0 {
			delete(n.refs, id)
		}
	}
	if !cp.active {
		return
	}
	n.actClauses += sign * cp.c.clauses
	for id, def := range cp.c.defs {
		if n.actRefs[id] += sign; n.actRefs[id] == 0 {
			delete(n.actRefs, id)
			delete(n.defs, id)
		} else if sign > 0 {
			n.defs[id] = def // a set's key defines it: any holder's def
		}
	}
}
