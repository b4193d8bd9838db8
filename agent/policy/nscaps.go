package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Caps per namespace and per node (docs/policy.md, Caps). The caps of
// caps.go bound one policy; nothing bounded how many policies a namespace
// has, and five NetworkPolicies of 4,000 named ports each (20,000 sets and
// clauses) stalled the node's table: every later delta took 2.3 -> 49 s
// and every full sync failed (issue 60, finding 5). A namespace's policies
// (its NetworkPolicies, staged NetworkPolicies and, in a network's engine,
// MultiNetworkPolicies) are held to caps on what they cost together; past
// one, the namespace's policies fail closed for its own pods alone: each
// pod a policy of it isolates stays isolated, and nothing of theirs is
// allowed (one closed policy per direction stands for them all, so a
// closed namespace costs a set and a chain per direction, whatever it
// holds). A node's table is held to caps on what the namespaces' policies
// it holds cost together; past one the namespaces that cost the most there
// are closed the same way, until the rest fits. ClusterNetworkPolicies are
// the cluster administrator's, bounded by the per-policy caps only.
//
// The values follow what the node's table takes in one transaction today
// (netops/nft renders each set as a set, each clause as a rule; a full
// sync is one batch): 4,000 clauses were a 1 s full sync and 8,000 failed
// it (ENOBUFS); 3,000 sets (then one per named port) 4.5 s, 4,000 failed
// the next;
// 786,000 prefixes 2-2.5 s. A node takes half of what failed, a namespace
// half of a node.
type capLimits struct {
	nsClauses, nsSets, nsElems       int
	nodeClauses, nodeSets, nodeElems int
}

var defaultCapLimits = capLimits{
	nsClauses: 2048, nsSets: 1024, nsElems: 262144,
	nodeClauses: 4096, nodeSets: 2048, nodeElems: 1048576,
}

// closedName is the name part of the policy that stands for a closed
// namespace's policies in its tier ("np/<ns>/" closedName): no API object
// has it (a colon is not allowed in a name).
const closedName = ":namespace-over-cap"

// namespaceIssueID is the Issue.Policy of a namespace's cap: the watcher
// records its Event on the Namespace.
func namespaceIssueID(ns string) string { return "ns/" + ns }

// nsCaps is the engine's state of the namespace and node caps.
type nsCaps struct {
	lim capLimits
	// counts is what each namespace's policies add up to, kept between
	// rebuilds and changed by the policies that changed since (count).
	counts map[string]*nsCount
	// kept are the closed namespaces, as they were measured, kept until
	// one of their policies changes (forget): a closed namespace's sets
	// are not in the model, and measuring them again would fill them.
	kept map[string]*nsLocal
	// owners are the open namespaces whose policies hold each set, elems
	// the elements of each one's sets and node those of their distinct
	// sets: swap counts the elements pods bring or take, and a count that
	// passes its cap asks for a rebuild (recheck).
	owners  map[policymodel.SetID][]string
	elems   map[string]int
	node    int
	recheck bool
}

// nsLocal is what a namespace's policies cost on this node: the clauses
// and the sets (with their sizes) of those that select a pod of it.
type nsLocal struct {
	ns      string
	clauses int
	sets    map[policymodel.SetID]int
	elems   int
	// issue says why it is closed (nil: open); own: for the namespace's
	// own caps, not the node's.
	issue *policymodel.Issue
	own   bool
	fresh bool // measured in this rebuild
}

// count is l's count of what (clauses, sets, elements).
func (l *nsLocal) count(what string) int {
	switch what {
	case "clauses":
		return l.clauses
	case "sets":
		return len(l.sets)
	}
	return l.elems
}

// capPlan is what a rebuild makes of the caps: the policies that select
// a pod of this node, the closed namespaces and why, the sets the
// measure filled (the rebuild keeps them), the open namespaces.
type capPlan struct {
	active map[string]bool
	byNS   map[string][]*compiled
	closed map[string]*policymodel.Issue
	filled map[policymodel.SetID]*policymodel.Set
	open   []*nsLocal
}

// forget drops what is kept of closed namespace ns: one of its policies
// changed (its count follows at its next measure).
func (c *nsCaps) forget(ns string) {
	delete(c.kept, ns)
}

// planCaps measures every namespace's policies against the caps and
// decides which namespaces are closed.
func (e *Engine) planCaps() *capPlan {
	c := &e.caps
	if c.counts == nil {
		c.counts, c.kept = map[string]*nsCount{}, map[string]*nsLocal{}
	}
	p := &capPlan{active: map[string]bool{}, byNS: map[string][]*compiled{}, closed: map[string]*policymodel.Issue{},
		filled: map[policymodel.SetID]*policymodel.Set{}}
	e.pruneSelMemo()
	for _, ps := range []map[string]*compiled{e.policies, e.staged} {
		for id, pc := range ps {
			if e.selectsLocal(pc) {
				p.active[id] = true
			}
			if pc.ns != "" {
				p.byNS[pc.ns] = append(p.byNS[pc.ns], pc)
			}
		}
	}
	for ns := range c.kept {
		if p.byNS[ns] == nil {
			delete(c.kept, ns) // its policies are gone
		}
	}
	for ns := range c.counts {
		if p.byNS[ns] == nil {
			delete(c.counts, ns)
		}
	}
	var cands []*nsLocal
	for _, ns := range slices.Sorted(maps.Keys(p.byNS)) {
		if k := c.kept[ns]; k != nil {
			if k.own {
				p.closed[ns] = k.issue
			} else {
				cands = append(cands, k) // closed on the node's cap: it may fit again
			}
			continue
		}
		l := e.measure(ns, p)
		if l.issue != nil {
			c.kept[ns], p.closed[ns] = l, l.issue
			continue
		}
		cands = append(cands, l)
	}
	e.nodeCaps(p, cands)
	return p
}

// measure measures namespace ns's policies: their clauses and sets (all
// of them) against the namespace's caps, then the elements of the sets
// of those that select a pod of this node, filling the new ones (kept in
// p.filled) no further than the cap. What the policies add up to is
// their count (nsCount), brought up to date first.
func (e *Engine) measure(ns string, p *capPlan) *nsLocal {
	lim := e.caps.lim
	l := &nsLocal{ns: ns, sets: map[policymodel.SetID]int{}, fresh: true}
	n := e.caps.count(ns, p.byNS[ns], p.active)
	switch {
	case n.clauses > lim.nsClauses:
		l.issue, l.own = nsIssue(ns, "clauses", n.clauses, lim.nsClauses), true
		return l
	case len(n.refs) > lim.nsSets:
		l.issue, l.own = nsIssue(ns, "sets", len(n.refs), lim.nsSets), true
		return l
	}
	l.clauses = n.actClauses
	for id, def := range n.defs {
		size, ok := e.sizeOf(id, def, p, lim.nsElems-l.elems)
		l.sets[id], l.elems = size, l.elems+size
		if !ok {
			l.issue, l.own = nsIssue(ns, "elements", l.elems, lim.nsElems), true
			return l
		}
	}
	return l
}

// sizeOf is the number of elements of set id of def: the model's if it
// has the set, else filled (into p.filled) up to room; false past it.
func (e *Engine) sizeOf(id policymodel.SetID, def *setDef, p *capPlan, room int) (int, bool) {
	if s := p.filled[id]; s != nil {
		return s.Len(), s.Len() <= room
	}
	if s := e.m.Sets[id]; s != nil && !def.derived {
		return s.Len(), s.Len() <= room
	}
	s, ok := e.fillUpTo(id, def, room)
	if ok {
		p.filled[id] = s
	}
	return s.Len(), ok
}

// nodeCaps decides which of the candidate namespaces (open, or closed on
// the node's caps before) the node holds: while what they hold together
// passes a node cap, the one with the most of it is closed. One let in on
// what it cost when it was closed is measured again first.
func (e *Engine) nodeCaps(p *capPlan, cands []*nsLocal) {
	for {
		open, why := e.fitNode(cands)
		i := slices.IndexFunc(open, func(l *nsLocal) bool { return !l.fresh })
		if i < 0 {
			for l, is := range why {
				l.issue, l.own, l.fresh = is, false, false
				e.caps.kept[l.ns], p.closed[l.ns] = l, is
			}
			for _, l := range open {
				delete(e.caps.kept, l.ns)
			}
			p.open = open
			return
		}
		j := slices.Index(cands, open[i])
		if m := e.measure(open[i].ns, p); m.issue != nil {
			e.caps.kept[m.ns], p.closed[m.ns] = m, m.issue
			cands = slices.Delete(cands, j, j+1)
		} else {
			cands[j] = m
		}
	}
}

// fitNode is the namespaces of cands the node's caps take (by name), and
// why each other one is closed.
func (e *Engine) fitNode(cands []*nsLocal) ([]*nsLocal, map[*nsLocal]*policymodel.Issue) {
	lim := e.caps.lim
	open := slices.Clone(cands)
	refs, size := map[policymodel.SetID]int{}, map[policymodel.SetID]int{}
	clauses, elems := 0, 0
	for _, l := range open {
		clauses += l.clauses
		for id, n := range l.sets {
			if refs[id] == 0 {
				elems += n
			}
			refs[id]++
			size[id] = n
		}
	}
	why := map[*nsLocal]*policymodel.Issue{}
	for {
		what, total, limit := "", 0, 0
		switch {
		case clauses > lim.nodeClauses:
			what, total, limit = "clauses", clauses, lim.nodeClauses
		case len(refs) > lim.nodeSets:
			what, total, limit = "sets", len(refs), lim.nodeSets
		case elems > lim.nodeElems:
			what, total, limit = "elements", elems, lim.nodeElems
		default:
			return open, why
		}
		i := 0 // the most of it; the first by name of those
		for j, l := range open {
			if l.count(what) > open[i].count(what) {
				i = j
			}
		}
		l := open[i]
		open = slices.Delete(open, i, i+1)
		clauses -= l.clauses
		for id := range l.sets {
			if refs[id]--; refs[id] == 0 {
				delete(refs, id)
				elems -= size[id]
			}
		}
		why[l] = nodeIssue(e.node, l.ns, what, total, limit, l.count(what))
	}
}

// nsIssue is the issue of namespace ns past its cap of what.
func nsIssue(ns, what string, n, limit int) *policymodel.Issue {
	held := "the namespace's policies hold"
	if what == "elements" {
		held = "the sets this node holds for the namespace's policies have"
	}
	return &policymodel.Issue{Policy: namespaceIssueID(ns), Field: what, Value: fmt.Sprint(n),
		Reason: fmt.Sprintf("%s %d %s in all, more than the %d the engine takes of one namespace (docs/policy.md, Caps); %s",
			held, n, capWhat(what), limit, nsClosedText)}
}

// nodeIssue is the issue of namespace ns, closed on node's cap of what
// (total, past limit), of which it held n.
func nodeIssue(node, ns, what string, total, limit, n int) *policymodel.Issue {
	return &policymodel.Issue{Policy: namespaceIssueID(ns), Field: "node " + what, Value: fmt.Sprint(n),
		Reason: fmt.Sprintf("node %s holds %d %s of the namespaces' policies in all, more than the %d it takes (docs/policy.md, Caps), and this namespace's are the most (%d); on this node %s",
			node, total, capWhat(what), limit, n, nsClosedText)}
}

func capWhat(what string) string {
	switch what {
	case "clauses":
		return "clauses (each rule's peers times its ports)"
	case "sets":
		return "sets (each peer, each rule's named ports and subject)"
	}
	return "set elements (prefixes, and the pods' addresses and named ports)"
}

const nsClosedText = "every policy of the namespace isolates the pods it selects in its directions and allows them nothing, " +
	"until the namespace is within its caps again: fewer policies, peers or named ports, or wider selectors"

// placeClosed puts closed namespace ns in the tiers: per direction one
// policy without rules whose subject is the namespace's pods of this node
// that its enforced policies isolate, if one of those selects a pod
// here. The tier's isolation then drops what comes to or from them.
func (e *Engine) placeClosed(in, eg *policymodel.Tiers, ns string, p *capPlan, defs map[policymodel.SetID]*setDef) {
	var subjects [2][]podSel
	kind, active := policymodel.KindNetworkPolicy, false
	for _, pc := range p.byNS[ns] {
		if IsStaged(pc.id) {
			continue
		}
		kind, _, _ = policymodel.SplitPolicyID(pc.id)
		active = active || p.active[pc.id]
		for d, iso := range pc.isolates {
			if iso {
				subjects[d] = append(subjects[d], pc.subject)
			}
		}
	}
	if !active {
		return
	}
	for d, ss := range subjects {
		if len(ss) == 0 {
			continue
		}
		dir := policymodel.Direction(d)
		def := &setDef{key: "isolated " + dir.String() + " local ns=" + ns, kind: policymodel.Addrs, local: true, derived: true, ns: ns,
			match: func(pod *Pod, nsObj *Namespace, node string) bool {
				return slices.ContainsFunc(ss, func(s podSel) bool { return s.matches(pod, nsObj, node) })
			}}
		id := policymodel.SetIDOf(def.key)
		defs[id] = def
		t := in
		if dir == policymodel.Egress {
			t = eg
		}
		t.NetworkPolicy = append(t.NetworkPolicy, &policymodel.Policy{ID: policymodel.NamespacedPolicyID(kind, ns, closedName),
			Tier: policymodel.TierNetworkPolicy, Subject: id, FailClosed: true})
	}
}

// closedIssues are the issues of the closed namespaces, by namespace.
func (p *capPlan) closedIssues() []policymodel.Issue {
	out := make([]policymodel.Issue, 0, len(p.closed))
	for _, ns := range slices.Sorted(maps.Keys(p.closed)) {
		out = append(out, *p.closed[ns])
	}
	return out
}

// account counts the elements of the open namespaces' sets in the new
// model's sets, for swap to follow.
func (c *nsCaps) account(p *capPlan, sets map[policymodel.SetID]*policymodel.Set) {
	c.owners, c.elems, c.node, c.recheck = map[policymodel.SetID][]string{}, map[string]int{}, 0, false
	for _, l := range p.open {
		for id := range l.sets {
			s := sets[id]
			if s == nil {
				continue
			}
			if len(c.owners[id]) == 0 {
				c.node += s.Len()
			}
			c.owners[id] = append(c.owners[id], l.ns)
			c.elems[l.ns] += s.Len()
		}
	}
}

// moved counts n elements that came to (or, negative, left) set id, and
// asks for a rebuild when a namespace's or the node's count passes its
// cap.
func (c *nsCaps) moved(id policymodel.SetID, n int) {
	if n == 0 {
		return
	}
	owners := c.owners[id]
	if len(owners) == 0 {
		return
	}
	if c.node <= c.lim.nodeElems && c.node+n > c.lim.nodeElems {
		c.recheck = true
	}
	c.node += n
	for _, ns := range owners {
		if c.elems[ns] <= c.lim.nsElems && c.elems[ns]+n > c.lim.nsElems {
			c.recheck = true
		}
		c.elems[ns] += n
	}
}

// settle rebuilds the model, merged into d, when swap saw a count pass
// its cap.
func (e *Engine) settle(d *policymodel.Delta) {
	if e.caps.recheck {
		e.caps.recheck = false
		d.Merge(e.rebuildUnlessHeld())
	}
}

// sortIssues orders issues by policy and field.
func sortIssues(issues []policymodel.Issue) {
	slices.SortFunc(issues, func(a, b policymodel.Issue) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Field, b.Field))
	})
}
