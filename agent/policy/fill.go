package policy

import "github.com/cnibox/cnibox/internal/policymodel"

// fill returns set id of def with the elements of every pod (of this node's
// pods only for a local set); one the caps' measure filled (plan) is
// taken as it is.
func (e *Engine) fill(id policymodel.SetID, def *setDef, plan *capPlan) *policymodel.Set {
	if s := plan.filled[id]; s != nil && !def.derived {
		return s
	}
	s, _ := e.fillUpTo(id, def, -1)
	return s
}

// fillUpTo is fill that stops, false, once the set holds more than limit
// elements (limit < 0: no limit). The set is sized as the model's set of
// that ID, if any (a derived set, of this node's pods, is filled again at
// each rebuild, mostly with what it held).
func (e *Engine) fillUpTo(id policymodel.SetID, def *setDef, limit int) (*policymodel.Set, bool) {
	hint := 0
	if old := e.m.Sets[id]; old != nil {
		hint = old.Len()
		if limit >= 0 {
			hint = min(hint, limit+1)
		}
	}
	s := policymodel.NewSetSized(id, def.kind, def.key, hint)
	over := func() bool { return limit >= 0 && s.Len() > limit }
	for _, p := range def.static {
		if s.Add(policymodel.Elem{Prefix: p}); over() {
			return s, false
		}
	}
	for _, n := range e.nodes {
		for _, x := range def.nodeElems(n) {
			s.Add(x)
		}
		if over() {
			return s, false
		}
	}
	if def.match == nil {
		return s, true
	}
	var buf []policymodel.Elem // one pod's elements, reused
	add := func(pods map[string]*Pod) bool {
		for _, p := range pods {
			if def.local && p.Node != e.node {
				continue
			}
			buf = def.appendElems(buf[:0], p, e.namespaces[p.Namespace], e.node)
			for _, x := range buf {
				s.Add(x)
			}
			if over() {
				return false
			}
		}
		return true
	}
	switch {
	case def.local:
		return s, add(e.localPods) // few: elems checks the namespace
	case def.ns != "":
		return s, add(e.nsPods[def.ns])
	}
	for name, pods := range e.nsPods {
		if ns := e.namespaces[name]; def.nsSel == nil || def.nsSel.matches(labelsOf(ns)) {
			if !add(pods) {
				return s, false
			}
		}
	}
	return s, true
}
