package policy

import (
	"cmp"
	"maps"
	"net/netip"
	"reflect"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha2"
)

// Delta is what one change did to the model: the nftables side applies it
// in one transaction (new sets with their elements, then the elements, then
// the rules if Rules, then the deletion of DelSets, which no rule uses any
// more).
type Delta struct {
	// Rules reports whether the tiers changed (a policy came, went or
	// changed): the model's Ingress and Egress are the new ones.
	Rules   bool
	AddSets []SetID // new sets; their elements are the model's
	DelSets []SetID
	// Add and Del are the elements that came to and left sets that were
	// there before.
	Add, Del map[SetID][]Elem
	// Issues reports whether the model's Issues changed.
	Issues bool
}

// Empty reports whether the change changed nothing.
func (d *Delta) Empty() bool {
	return !d.Rules && !d.Issues && len(d.AddSets)+len(d.DelSets)+len(d.Add)+len(d.Del) == 0
}

func (d *Delta) elem(id SetID, e Elem, add bool) {
	m := &d.Del
	if add {
		m = &d.Add
	}
	if *m == nil {
		*m = map[SetID][]Elem{}
	}
	(*m)[id] = append((*m)[id], e)
}

// Engine holds what the policies of one node are made of and keeps its
// model: each Set* and Delete* call returns the Delta of the model. A pod's
// change costs one match per set; a namespace's, one per set and pod of the
// namespace; a policy's, a scan of the pods for the sets it brings. It is
// not safe for concurrent use; the model it returns changes with the next
// call.
type Engine struct {
	node       string
	nsPods     map[string]map[string]*Pod // by namespace and name
	localPods  map[string]*Pod            // this node's
	nodeAddrs  []netip.Prefix
	namespaces map[string]*Namespace
	policies   map[string]*compiled
	defs       map[SetID]*setDef
	active     map[string]bool // the policies that select a pod of this node
	// The sets a pod may be in: those of its namespace (byNS), and those
	// of any namespace (anyNS) that its namespace's labels let in
	// (nsCands, filled on demand, dropped when the labels change).
	byNS    map[string][]SetID
	anyNS   []SetID
	nsCands map[string][]SetID
	m       *Model
	// held: policy changes wait for Release (hold.go); stale: one came.
	held, stale bool
}

// NewEngine returns an engine for the node named node, with no policies.
func NewEngine(node string) *Engine {
	e := &Engine{
		node:       node,
		nsPods:     map[string]map[string]*Pod{},
		localPods:  map[string]*Pod{},
		namespaces: map[string]*Namespace{},
		policies:   map[string]*compiled{},
		defs:       map[SetID]*setDef{},
		m:          &Model{Node: node, Sets: map[SetID]*Set{}},
	}
	e.rebuild()
	return e
}

// Model returns the model (valid until the next call).
func (e *Engine) Model() *Model { return e.m }

// SetPod adds or replaces a pod.
func (e *Engine) SetPod(p *Pod) Delta {
	old := e.nsPods[p.Namespace][p.Name]
	if e.nsPods[p.Namespace] == nil {
		e.nsPods[p.Namespace] = map[string]*Pod{}
	}
	e.nsPods[p.Namespace][p.Name] = p
	switch {
	case p.Node == e.node:
		e.localPods[p.Key()] = p
	case old != nil && old.Node == e.node:
		delete(e.localPods, p.Key())
	}
	var d Delta
	ns := e.namespaces[p.Namespace]
	e.moveAll(&d, p.Namespace, old, ns, p)
	if p.Node == e.node || (old != nil && old.Node == e.node) {
		e.reactivate(&d, p.Namespace)
	}
	return d
}

// moveAll moves a pod of namespace name from old to p (either nil) in every
// set it may be in.
func (e *Engine) moveAll(d *Delta, name string, old *Pod, ns *Namespace, p *Pod) {
	for _, id := range e.byNS[name] {
		e.move(d, id, e.defs[id], old, ns, p, ns)
	}
	for _, id := range e.candidates(name, ns) {
		e.move(d, id, e.defs[id], old, ns, p, ns)
	}
}

// candidates are the sets of anyNS that a pod of namespace name may be in.
func (e *Engine) candidates(name string, ns *Namespace) []SetID {
	if c, ok := e.nsCands[name]; ok {
		return c
	}
	c := []SetID{}
	for _, id := range e.anyNS {
		if s := e.defs[id].nsSel; s == nil || s.matches(labelsOf(ns)) {
			c = append(c, id)
		}
	}
	e.nsCands[name] = c
	return c
}

// DeletePod removes the pod namespace/name.
func (e *Engine) DeletePod(namespace, name string) Delta {
	old := e.nsPods[namespace][name]
	var d Delta
	if old == nil {
		return d
	}
	delete(e.localPods, old.Key())
	delete(e.nsPods[namespace], name)
	if len(e.nsPods[namespace]) == 0 {
		delete(e.nsPods, namespace)
	}
	e.moveAll(&d, namespace, old, e.namespaces[namespace], nil)
	if old.Node == e.node {
		e.reactivate(&d, namespace)
	}
	return d
}

// SetNamespace adds or replaces a namespace.
func (e *Engine) SetNamespace(ns *Namespace) Delta {
	old := e.namespaces[ns.Name]
	e.namespaces[ns.Name] = ns
	return e.relabel(ns.Name, old, ns)
}

// DeleteNamespace removes a namespace.
func (e *Engine) DeleteNamespace(name string) Delta {
	old := e.namespaces[name]
	delete(e.namespaces, name)
	return e.relabel(name, old, nil)
}

// relabel moves the namespace's pods in the sets that read its labels.
func (e *Engine) relabel(name string, old, ns *Namespace) Delta {
	var d Delta
	if old != nil && ns != nil && reflect.DeepEqual(old.Labels, ns.Labels) {
		return d
	}
	delete(e.nsCands, name)
	for id, def := range e.defs {
		if def.nsSel == nil {
			continue
		}
		for _, p := range e.nsPods[name] {
			e.move(&d, id, def, p, old, p, ns)
		}
	}
	e.reactivate(&d, "") // a ClusterNetworkPolicy's subject reads namespace labels
	return d
}

// move updates set id for a pod that was old in oldNS and is p in ns (either
// nil: absent), recording the elements that came or went in d.
func (e *Engine) move(d *Delta, id SetID, def *setDef, old *Pod, oldNS *Namespace, p *Pod, ns *Namespace) {
	if def.match == nil {
		return
	}
	before, after := def.elems(old, oldNS, e.node), def.elems(p, ns, e.node)
	s := e.m.Sets[id]
	for _, x := range before {
		if !slices.Contains(after, x) && s.del(x) {
			d.elem(id, x, false)
		}
	}
	for _, x := range after {
		if !slices.Contains(before, x) && s.add(x) {
			d.elem(id, x, true)
		}
	}
}

// SetNodeAddrs sets the node's own addresses.
func (e *Engine) SetNodeAddrs(addrs []netip.Addr) Delta {
	e.nodeAddrs = nil // a new slice: the old set's definition keeps its own
	for _, a := range addrs {
		e.nodeAddrs = append(e.nodeAddrs, hostPrefix(a.Unmap()))
	}
	return e.rebuildUnlessHeld()
}

// SetNetworkPolicy adds or replaces a NetworkPolicy.
func (e *Engine) SetNetworkPolicy(np *networkingv1.NetworkPolicy) Delta {
	return e.setCompiled(compileNP(np))
}

// setCompiled adds or replaces a compiled policy. Compiling reads the
// policy alone: the watcher does it before it takes the lock that every
// change waits on, and hands the result here.
func (e *Engine) setCompiled(c *compiled) Delta {
	e.policies[c.id] = c
	return e.rebuildUnlessHeld()
}

// DeleteNetworkPolicy removes a NetworkPolicy.
func (e *Engine) DeleteNetworkPolicy(namespace, name string) Delta {
	delete(e.policies, "np/"+namespace+"/"+name)
	return e.rebuildUnlessHeld()
}

// SetClusterNetworkPolicy adds or replaces a ClusterNetworkPolicy.
func (e *Engine) SetClusterNetworkPolicy(cnp *cnpv1.ClusterNetworkPolicy) Delta {
	return e.setCompiled(compileCNP(cnp))
}

// DeleteClusterNetworkPolicy removes a ClusterNetworkPolicy.
func (e *Engine) DeleteClusterNetworkPolicy(name string) Delta {
	delete(e.policies, "cnp/"+name)
	return e.rebuildUnlessHeld()
}

// rebuild makes the tiers and the set definitions of the policies anew.
// Sets that stay keep their elements (a set's key defines them), but for
// the derived ones (of this node's pods: few), which are computed again.
func (e *Engine) rebuild() Delta {
	var d Delta
	var in, eg Tiers
	defs := map[SetID]*setDef{}
	var issues []Issue
	guardNS := map[string]bool{}
	guardAll := false
	active := map[string]bool{}
	for _, c := range e.policies {
		issues = append(issues, c.issues...)
		// Where a policy could select a pod of this node, whether or not
		// one is here yet: a new pod there is pending from its ADD.
		if c.subject.ns != "" {
			guardNS[c.subject.ns] = true
		} else {
			guardAll = true
		}
		if !e.selectsLocal(c) {
			continue // no rule of it can apply here: no chain, no sets
		}
		active[c.id] = true
		for dir, p := range c.dirs {
			if p == nil {
				continue
			}
			t := &in
			if Direction(dir) == Egress {
				t = &eg
			}
			switch p.Tier {
			case TierAdmin:
				t.Admin = append(t.Admin, p)
			case TierNetworkPolicy:
				t.NetworkPolicy = append(t.NetworkPolicy, p)
			default:
				t.Baseline = append(t.Baseline, p)
			}
		}
		for id, def := range c.defs {
			defs[id] = def
		}
	}
	for dir, t := range []*Tiers{&in, &eg} {
		def := e.isolatedDef(Direction(dir))
		t.Isolated = setID(def.key)
		defs[t.Isolated] = def
		for _, ps := range [][]*Policy{t.Admin, t.NetworkPolicy, t.Baseline} {
			slices.SortFunc(ps, func(a, b *Policy) int {
				return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
			})
		}
	}
	node := &setDef{key: "node addrs local", kind: Addrs, static: e.nodeAddrs, derived: true}
	nodeAddrs := setID(node.key)
	defs[nodeAddrs] = node
	slices.SortFunc(issues, func(a, b Issue) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Field, b.Field))
	})

	sets := map[SetID]*Set{}
	for id, def := range defs {
		old := e.m.Sets[id]
		switch {
		case old != nil && !def.derived:
			sets[id] = old
		case old != nil:
			s := e.fill(id, def)
			for _, x := range old.Elems() {
				if !s.Has(x) {
					d.elem(id, x, false)
				}
			}
			for _, x := range s.Elems() {
				if !old.Has(x) {
					d.elem(id, x, true)
				}
			}
			sets[id] = s
		default:
			sets[id] = e.fill(id, def)
			d.AddSets = append(d.AddSets, id)
		}
	}
	for id := range e.m.Sets {
		if sets[id] == nil {
			d.DelSets = append(d.DelSets, id)
		}
	}
	slices.Sort(d.AddSets)
	slices.Sort(d.DelSets)
	d.Rules = !reflect.DeepEqual(in, e.m.Ingress) || !reflect.DeepEqual(eg, e.m.Egress)
	d.Issues = !slices.Equal(issues, e.m.Issues)
	e.defs, e.active = defs, active
	e.index()
	guard := slices.Sorted(maps.Keys(guardNS))
	d.Rules = d.Rules || guardAll != e.m.GuardAll || !slices.Equal(guard, e.m.GuardNamespaces)
	e.m = &Model{Node: e.node, NodeAddrs: nodeAddrs, Ingress: in, Egress: eg, Sets: sets, Issues: issues, LocalPods: e.localPods,
		GuardAll: guardAll, GuardNamespaces: guard}
	return d
}

// index files the sets by the namespaces whose pods they may take.
func (e *Engine) index() {
	e.byNS, e.anyNS, e.nsCands = map[string][]SetID{}, nil, map[string][]SetID{}
	for id, def := range e.defs {
		switch {
		case def.match == nil:
		case def.ns != "":
			e.byNS[def.ns] = append(e.byNS[def.ns], id)
		default:
			e.anyNS = append(e.anyNS, id)
		}
	}
}

// fill returns set id of def with the elements of every pod (of this node's
// pods only for a local set).
func (e *Engine) fill(id SetID, def *setDef) *Set {
	s := &Set{ID: id, Kind: def.kind, Key: def.key}
	for _, p := range def.static {
		s.add(Elem{Prefix: p})
	}
	if def.match == nil {
		return s
	}
	add := func(pods map[string]*Pod) {
		for _, p := range pods {
			if def.local && p.Node != e.node {
				continue
			}
			for _, x := range def.elems(p, e.namespaces[p.Namespace], e.node) {
				s.add(x)
			}
		}
	}
	switch {
	case def.local:
		add(e.localPods) // few: elems checks the namespace
	case def.ns != "":
		add(e.nsPods[def.ns])
	default:
		for name, pods := range e.nsPods {
			if ns := e.namespaces[name]; def.nsSel == nil || def.nsSel.matches(labelsOf(ns)) {
				add(pods)
			}
		}
	}
	return s
}

// labelsOf is the labels of ns (nil: none).
func labelsOf(ns *Namespace) map[string]string {
	if ns == nil {
		return nil
	}
	return ns.Labels
}

// isolatedDef is the set of this node's pods that a NetworkPolicy isolates
// in dir.
func (e *Engine) isolatedDef(dir Direction) *setDef {
	subjects := map[string][]podSel{} // by namespace: NetworkPolicies are namespaced
	for _, c := range e.policies {
		if c.isolates[dir] {
			subjects[c.subject.ns] = append(subjects[c.subject.ns], c.subject)
		}
	}
	return &setDef{
		key:     "isolated " + dir.String() + " local",
		kind:    Addrs,
		local:   true,
		derived: true,
		match: func(p *Pod, ns *Namespace, node string) bool {
			for _, s := range subjects[p.Namespace] {
				if s.matches(p, ns, node) {
					return true
				}
			}
			return false
		},
	}
}

// Input is everything Resolve reads.
type Input struct {
	Node                   string
	NodeAddrs              []netip.Addr
	Pods                   []*Pod
	Namespaces             []*Namespace
	NetworkPolicies        []*networkingv1.NetworkPolicy
	ClusterNetworkPolicies []*cnpv1.ClusterNetworkPolicy
}

// Resolve returns the model of in: the policies first (one rebuild), so
// that every pod is matched once against the sets it may be in.
func Resolve(in Input) *Model {
	e := NewEngine(in.Node)
	for _, a := range in.NodeAddrs {
		e.nodeAddrs = append(e.nodeAddrs, hostPrefix(a.Unmap()))
	}
	for _, np := range in.NetworkPolicies {
		c := compileNP(np)
		e.policies[c.id] = c
	}
	for _, cnp := range in.ClusterNetworkPolicies {
		c := compileCNP(cnp)
		e.policies[c.id] = c
	}
	e.rebuild()
	for _, ns := range in.Namespaces {
		e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		e.SetPod(p)
	}
	return e.Model()
}

// hostPrefix is the single-address prefix of a.
func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
