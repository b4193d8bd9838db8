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
//
// It is memoised per compiled policy (a changed policy is a new one)
// until the node's pods of the policy's namespace change (localChanged)
// or, for a cluster's policy, any pod of the node or namespace's labels:
// every rebuild asked it of every policy, each a walk of the node's pods
// (planCaps: 2 s of bench-policy's profile).
func (e *Engine) selectsLocal(c *compiled) bool {
	if v, ok := e.selMemo[c]; ok {
		return v
	}
	v := false
	for _, p := range e.localPods {
		if c.subject.matches(p, e.namespaces[p.Namespace], e.node) {
			v = true
			break
		}
	}
	if e.selMemo == nil {
		e.selMemo = map[*compiled]bool{}
	}
	e.selMemo[c] = v
	return v
}

// localChanged drops what selectsLocal memoised of the policies whose
// subject may hold a pod of namespace ns ("": of any namespace, a
// namespace's labels changed; the cluster's policies read them): the
// node's pods there changed.
func (e *Engine) localChanged(ns string) {
	for c := range e.selMemo {
		if c.subject.ns == "" || (ns != "" && c.subject.ns == ns) {
			delete(e.selMemo, c)
		}
	}
}

// pruneSelMemo drops what selectsLocal memoised of policies replaced or
// gone, once they are as many as those that are not.
func (e *Engine) pruneSelMemo() {
	if len(e.selMemo) <= 2*(len(e.policies)+len(e.staged)) {
		return
	}
	for c := range e.selMemo {
		if e.policies[c.id] != c && e.staged[c.id] != c {
			delete(e.selMemo, c)
		}
	}
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
