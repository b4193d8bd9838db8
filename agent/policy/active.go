package policy

import "github.com/cnibox/cnibox/internal/policymodel"

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
func (e *Engine) reactivate(d *policymodel.Delta, ns string) {
	if e.held {
		e.stale = true // Release rebuilds
		return
	}
	for _, ps := range []map[string]*compiled{e.policies, e.staged} {
		for _, c := range ps {
			if ns != "" && c.subject.ns != "" && c.subject.ns != ns {
				continue // a NetworkPolicy of another namespace
			}
			if e.selectsLocal(c) != e.active[c.id] {
				d.Merge(e.rebuild())
				return
			}
		}
	}
}
