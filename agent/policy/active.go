package policy

import "slices"

// A node's model holds only the policies whose subject holds one of its
// pods (docs/policy.md, the model): the pod and namespace changes that
// bring a policy's first subject to the node or take its last away
// rebuild the model, merged into their own Delta.

// selectsLocal reports whether c's subject holds a pod of this node: only
// such a policy has rules and sets in the node's model (at 5,000 nodes a
// node holds a few of the cluster's policies' subjects; the others' peer
// sets were most of the agent's memory and of its table).
func (e *Engine) selectsLocal(c *compiled) bool {
	for _, p := range e.localPods {
		if c.subject.matches(p, e.namespaces[p.Namespace], e.node) {
			return true
		}
	}
	return false
}

// reactivate rebuilds the model when a change of this node's pods (of
// namespace ns; "" for any: a namespace's labels) makes a policy select
// its first pod here or its last one leave, merging that into d.
func (e *Engine) reactivate(d *Delta, ns string) {
	if e.held {
		e.stale = true // Release rebuilds
		return
	}
	for _, c := range e.policies {
		if ns != "" && c.subject.ns != "" && c.subject.ns != ns {
			continue // a NetworkPolicy of another namespace
		}
		if e.selectsLocal(c) != e.active[c.id] {
			d.merge(e.rebuild())
			return
		}
	}
}

// merge appends o, a change that came after d, to d.
func (d *Delta) merge(o Delta) {
	d.Rules = d.Rules || o.Rules
	d.Issues = d.Issues || o.Issues
	d.AddSets = append(d.AddSets, o.AddSets...)
	d.DelSets = append(d.DelSets, o.DelSets...)
	for id, es := range o.Add {
		for _, x := range es {
			if !d.cancel(d.Del, id, x) {
				d.elem(id, x, true)
			}
		}
	}
	for id, es := range o.Del {
		for _, x := range es {
			if !d.cancel(d.Add, id, x) {
				d.elem(id, x, false)
			}
		}
	}
}

// cancel removes x from m[id] and reports whether it was there.
func (d *Delta) cancel(m map[SetID][]Elem, id SetID, x Elem) bool {
	i := slices.Index(m[id], x)
	if i < 0 {
		return false
	}
	m[id] = slices.Delete(m[id], i, i+1)
	return true
}
