package policy

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync/atomic"

	networkingv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Engine holds what the policies of one node are made of and keeps its
// model: each Set* and Delete* call returns the Delta of the model. A pod's
// change costs one match per set; a namespace's, one per set and pod of the
// namespace; a policy's, a scan of the pods for the sets it brings. It is
// not safe for concurrent use; the model it returns never changes
// (cow.go), so its readers need not hold the engine owner's lock.
type Engine struct {
	node       string
	nsPods     map[string]map[string]*Pod      // by namespace and name
	localPods  map[string]*Pod                 // this node's
	local      map[string]policymodel.LocalPod // localPods as the model shows them
	nodeAddrs  []netip.Prefix
	flowLogOn  bool           // SetFlowLog was called: the annotations count
	flowLog    FlowLogSetting // logged everywhere (SetFlowLog)
	namespaces map[string]*Namespace
	nodes      map[string]*Node // the cluster's, for `nodes` peers (nodes.go)
	policies   map[string]*compiled
	staged     map[string]*compiled // evaluated, never enforced (staged.go)
	defs       map[policymodel.SetID]*setDef
	active     map[string]bool // the policies that select a pod of this node
	// selMemo: selectsLocal of each policy, as far as known (active.go).
	selMemo map[*compiled]bool
	// The sets a pod may be in: those of its namespace (byNS), and those
	// of any namespace (anyNS) that its namespace's labels let in
	// (nsCands, filled on demand, dropped when the labels change).
	byNS    map[string][]policymodel.SetID
	anyNS   []policymodel.SetID
	nsCands map[string][]policymodel.SetID
	m       *policymodel.Model
	// held: policy changes wait for Release (hold.go); stale: one came.
	held, stale bool
	// caps: the namespaces' and the node's caps (nscaps.go).
	caps nsCaps
	// The model's copy on write (cow.go): it was handed out (published),
	// the sets it may change in place (own), the rebuilds made (rulesGen:
	// the rules change only there).
	published atomic.Bool // Model may be called beside a reader's Model (tests)
	own       map[policymodel.SetID]bool
	rulesGen  uint64
	// setsShared and localShared: the model's map of sets and its local
	// pods are still the model's handed out before.
	setsShared, localShared bool
	// For Describe (describe.go): the rules by counter ID, and the pods
	// by address (nil until asked for).
	rules *counterIndex
	byIP  map[netip.Addr]PodRef
}

// NewEngine returns an engine for the node named node, with no policies.
func NewEngine(node string) *Engine {
	e := &Engine{
		node:       node,
		nsPods:     map[string]map[string]*Pod{},
		localPods:  map[string]*Pod{},
		local:      map[string]policymodel.LocalPod{},
		namespaces: map[string]*Namespace{},
		nodes:      map[string]*Node{},
		policies:   map[string]*compiled{},
		staged:     map[string]*compiled{},
		defs:       map[policymodel.SetID]*setDef{},
		m:          &policymodel.Model{Node: node, Sets: map[policymodel.SetID]*policymodel.Set{}},
		caps:       nsCaps{lim: defaultCapLimits},
		own:        map[policymodel.SetID]bool{},
		rules:      &counterIndex{},
	}
	e.rebuild()
	return e
}

// SetPod adds or replaces a pod.
func (e *Engine) SetPod(p *Pod) policymodel.Delta {
	old := e.nsPods[p.Namespace][p.Name]
	if e.nsPods[p.Namespace] == nil {
		e.nsPods[p.Namespace] = map[string]*Pod{}
	}
	e.nsPods[p.Namespace][p.Name] = p
	e.indexIPs(old, p)
	if p.Node == e.node || (old != nil && old.Node == e.node) {
		e.localChanged(p.Namespace)
	}
	switch {
	case p.Node == e.node:
		e.localForWrite()
		e.localPods[p.Key()] = p
		e.local[p.Key()] = policymodel.LocalPod{IPs: p.IPs, HostNetwork: p.HostNetwork, Done: p.Done}
	case old != nil && old.Node == e.node:
		e.localForWrite()
		delete(e.localPods, p.Key())
		delete(e.local, p.Key())
	}
	var d policymodel.Delta
	ns := e.namespaces[p.Namespace]
	e.moveAll(&d, p.Namespace, old, ns, p)
	if p.Node == e.node || (old != nil && old.Node == e.node) {
		e.reactivate(&d, p.Namespace)
	}
	e.settle(&d)
	return d
}

// moveAll moves a pod of namespace name from old to p (either nil) in every
// set it may be in.
func (e *Engine) moveAll(d *policymodel.Delta, name string, old *Pod, ns *Namespace, p *Pod) {
	for _, id := range e.byNS[name] {
		e.move(d, id, e.defs[id], old, ns, p, ns)
	}
	for _, id := range e.candidates(name, ns) {
		e.move(d, id, e.defs[id], old, ns, p, ns)
	}
}

// candidates are the sets of anyNS that a pod of namespace name may be in.
func (e *Engine) candidates(name string, ns *Namespace) []policymodel.SetID {
	if c, ok := e.nsCands[name]; ok {
		return c
	}
	c := []policymodel.SetID{}
	for _, id := range e.anyNS {
		if s := e.defs[id].nsSel; s == nil || s.matches(labelsOf(ns)) {
			c = append(c, id)
		}
	}
	e.nsCands[name] = c
	return c
}

// DeletePod removes the pod namespace/name.
func (e *Engine) DeletePod(namespace, name string) policymodel.Delta {
	old := e.nsPods[namespace][name]
	var d policymodel.Delta
	if old == nil {
		return d
	}
	if old.Node == e.node {
		e.localForWrite()
		e.localChanged(namespace)
	}
	delete(e.localPods, old.Key())
	delete(e.local, old.Key())
	delete(e.nsPods[namespace], name)
	e.indexIPs(old, nil)
	if len(e.nsPods[namespace]) == 0 {
		delete(e.nsPods, namespace)
	}
	e.moveAll(&d, namespace, old, e.namespaces[namespace], nil)
	if old.Node == e.node {
		e.reactivate(&d, namespace)
	}
	e.settle(&d)
	return d
}

// SetNamespace adds or replaces a namespace.
func (e *Engine) SetNamespace(ns *Namespace) policymodel.Delta {
	old := e.namespaces[ns.Name]
	e.namespaces[ns.Name] = ns
	d := e.relabel(ns.Name, old, ns)
	e.reflowLog(&d, old, ns)
	e.settle(&d)
	return d
}

// DeleteNamespace removes a namespace.
func (e *Engine) DeleteNamespace(name string) policymodel.Delta {
	old := e.namespaces[name]
	delete(e.namespaces, name)
	d := e.relabel(name, old, nil)
	e.reflowLog(&d, old, nil)
	e.settle(&d)
	return d
}

// relabel moves the namespace's pods in the sets that read its labels.
func (e *Engine) relabel(name string, old, ns *Namespace) policymodel.Delta {
	var d policymodel.Delta
	if old != nil && ns != nil && reflect.DeepEqual(old.Labels, ns.Labels) {
		return d
	}
	delete(e.nsCands, name)
	e.localChanged("")
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
func (e *Engine) move(d *policymodel.Delta, id policymodel.SetID, def *setDef, old *Pod, oldNS *Namespace, p *Pod, ns *Namespace) {
	if def.match == nil {
		return
	}
	e.swap(d, id, def.elems(old, oldNS, e.node), def.elems(p, ns, e.node))
}

// swap counts the elements before out of set id and those after in,
// recording in d those that left or came (a set counts its elements: an
// address two pods or nodes have stays until neither has it).
func (e *Engine) swap(d *policymodel.Delta, id policymodel.SetID, before, after []policymodel.Elem) {
	s, n := e.m.Sets[id], 0
	for _, x := range before {
		if !slices.Contains(after, x) && s.Has(x) && e.setForWrite(id).Del(x) {
			d.Note(id, x, false)
			n--
		}
	}
	for _, x := range after {
		if !slices.Contains(before, x) && e.setForWrite(id).Add(x) {
			d.Note(id, x, true)
			n++
		}
	}
	e.caps.moved(id, n)
}

// SetNodeAddrs sets the node's own addresses.
func (e *Engine) SetNodeAddrs(addrs []netip.Addr) policymodel.Delta {
	e.nodeAddrs = nil // a new slice: the old set's definition keeps its own
	for _, a := range addrs {
		e.nodeAddrs = append(e.nodeAddrs, hostPrefix(a.Unmap()))
	}
	return e.rebuildUnlessHeld()
}

// SetNetworkPolicy adds or replaces a NetworkPolicy.
func (e *Engine) SetNetworkPolicy(np *networkingv1.NetworkPolicy) policymodel.Delta {
	return e.setCompiled(compileNP(np))
}

// setCompiled adds or replaces a compiled policy. Compiling reads the
// policy alone: the watcher does it before it takes the lock that every
// change waits on, and hands the result here.
func (e *Engine) setCompiled(c *compiled) policymodel.Delta {
	e.caps.forget(c.ns)
	if IsStaged(c.id) {
		e.staged[c.id] = c // evaluated, never enforced (staged.go)
	} else {
		e.policies[c.id] = c
	}
	return e.rebuildUnlessHeld()
}

// DeleteNetworkPolicy removes a NetworkPolicy.
func (e *Engine) DeleteNetworkPolicy(namespace, name string) policymodel.Delta {
	delete(e.policies, policymodel.NetworkPolicyID(namespace, name))
	e.caps.forget(namespace)
	return e.rebuildUnlessHeld()
}

// SetClusterNetworkPolicy adds or replaces a ClusterNetworkPolicy.
func (e *Engine) SetClusterNetworkPolicy(cnp *cnpv1.ClusterNetworkPolicy) policymodel.Delta {
	return e.setCompiled(compileCNP(cnp))
}

// DeleteClusterNetworkPolicy removes a ClusterNetworkPolicy.
func (e *Engine) DeleteClusterNetworkPolicy(name string) policymodel.Delta {
	delete(e.policies, policymodel.ClusterPolicyID(name))
	return e.rebuildUnlessHeld()
}

// rebuild makes the tiers and the set definitions of the policies anew.
// Sets that stay keep their elements (a set's key defines them), but for
// the derived ones (of this node's pods: few), which are computed again.
func (e *Engine) rebuild() policymodel.Delta {
	var d policymodel.Delta
	var in, eg policymodel.Tiers
	defs := map[policymodel.SetID]*setDef{}
	var issues []policymodel.Issue
	guardNS := map[string]bool{}
	guardAll := false
	active := map[string]bool{}
	plan := e.planCaps()
	for _, c := range e.policies {
		issues = append(issues, c.issues...)
		// Where a policy could select a pod of this node, whether or not
		// one is here yet: a new pod there is pending from its ADD.
		if c.subject.ns != "" {
			guardNS[c.subject.ns] = true
		} else {
			guardAll = true
		}
		if !plan.active[c.id] {
			continue // no rule of it can apply here: no chain, no sets
		}
		active[c.id] = true
		if plan.closed[c.ns] == nil {
			place(&in, &eg, c, defs)
		}
	}
	for ns := range plan.closed {
		e.placeClosed(&in, &eg, ns, plan, defs)
	}
	issues = append(issues, plan.closedIssues()...)
	for dir, t := range []*policymodel.Tiers{&in, &eg} {
		def := e.isolatedDef(policymodel.Direction(dir), "", e.policies)
		t.Isolated = policymodel.SetIDOf(def.key)
		defs[t.Isolated] = def
		sortTiers(t)
	}
	flowLog := e.flowLogDefs(defs)
	staged := e.stagedRules(in, eg, defs, active, plan)
	if e.flowLogOn && staged != nil {
		flowLog.Staged = policymodel.SetIDOf(stagedSubjectsKey)
	}
	node := &setDef{key: "node addrs local", kind: policymodel.Addrs, static: e.nodeAddrs, derived: true}
	nodeAddrs := policymodel.SetIDOf(node.key)
	defs[nodeAddrs] = node
	sortIssues(issues)

	published := e.published.Load()
	if published || e.localShared { // a model handed out keeps its local pods
		e.local = maps.Clone(e.local)
	}
	if published {
		e.own = map[policymodel.SetID]bool{}
	}
	sets := map[policymodel.SetID]*policymodel.Set{}
	for id, def := range defs {
		old := e.m.Sets[id]
		switch {
		case old != nil && !def.derived:
			sets[id] = old
		case old != nil:
			s := e.fill(id, def, plan)
			e.own[id] = true
			came := 0
			for _, x := range s.Elems() {
				if !old.Has(x) {
					d.Note(id, x, true)
					came++
				}
			}
			if old.Len() != s.Len()-came { // some left (else: as many, all of them still in)
				for _, x := range old.Elems() {
					if !s.Has(x) {
						d.Note(id, x, false)
					}
				}
			}
			sets[id] = s
		default:
			sets[id] = e.fill(id, def, plan)
			e.own[id] = true
			d.AddSets = append(d.AddSets, id)
		}
	}
	for id := range e.m.Sets {
		if sets[id] == nil {
			d.DelSets = append(d.DelSets, id)
			delete(e.own, id)
		}
	}
	slices.Sort(d.AddSets)
	slices.Sort(d.DelSets)
	domains := domainsOf(e.policies, active)
	d.Rules = !reflect.DeepEqual(in, e.m.Ingress) || !reflect.DeepEqual(eg, e.m.Egress) || flowLog != e.m.Log || !reflect.DeepEqual(domains, e.m.Domains)
	d.Issues = !slices.Equal(issues, e.m.Issues)
	e.defs, e.active = defs, active
	e.index()
	e.caps.account(plan, sets)
	guard := slices.Sorted(maps.Keys(guardNS))
	d.Rules = d.Rules || guardAll != e.m.GuardAll || !slices.Equal(guard, e.m.GuardNamespaces)
	if staged != nil {
		staged.NodeAddrs = nodeAddrs
	}
	e.rulesGen++
	e.m = &policymodel.Model{Node: e.node, Rules: policymodel.Rules{NodeAddrs: nodeAddrs, Ingress: in, Egress: eg, Log: flowLog, Domains: domains}, Staged: staged,
		Sets: sets, Issues: issues, LocalPods: e.local,
		GuardAll: guardAll, GuardNamespaces: guard, Resolvers: e.m.Resolvers, Generation: generations.Add(1)}
	e.published.Store(false)
	e.setsShared, e.localShared = false, false
	return d
}

// index files the sets by the namespaces whose pods they may take.
func (e *Engine) index() {
	e.byNS, e.anyNS, e.nsCands = map[string][]policymodel.SetID{}, nil, map[string][]policymodel.SetID{}
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

// labelsOf is the labels of ns (nil: none).
func labelsOf(ns *Namespace) map[string]string {
	if ns == nil {
		return nil
	}
	return ns.Labels
}

// isolatedDef is the set of this node's pods that a NetworkPolicy of
// policies isolates in dir (the enforced ones; for the staged model, those
// and the staged ones, keyed with prefix).
func (e *Engine) isolatedDef(dir policymodel.Direction, prefix string, policies ...map[string]*compiled) *setDef {
	// By namespace (NetworkPolicies are namespaced), each the compiled
	// policy's own selector (a compiled policy is never changed: replaced).
	subjects := make(map[string][]*podSel, len(e.nsPods))
	for _, ps := range policies {
		for _, c := range ps {
			if c.isolates[dir] {
				subjects[c.subject.ns] = append(subjects[c.subject.ns], &c.subject)
			}
		}
	}
	return &setDef{
		key:     prefix + "isolated " + dir.String() + " local",
		kind:    policymodel.Addrs,
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

// hostPrefix is the single-address prefix of a.
func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
