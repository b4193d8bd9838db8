package policy

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	nv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// manyPeers is a NetworkPolicy of namespace x named name that isolates
// x/a for ingress and takes it from n pod selectors of x that no two peers
// share (a set each), from namespace y's pods, on ports.
func manyPeers(name string, n, first int, ports ...nv1.NetworkPolicyPort) *nv1.NetworkPolicy {
	var peers []nv1.NetworkPolicyPeer
	for i := range n {
		peers = append(peers, nv1.NetworkPolicyPeer{PodSelector: sel("k", fmt.Sprint(first+i))})
	}
	peers = append(peers, nv1.NetworkPolicyPeer{PodSelector: sel(), NamespaceSelector: sel("ns", "y")})
	return np("x", name, nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), Ingress: []nv1.NetworkPolicyIngressRule{{From: peers, Ports: ports}}})
}

// namedPorts is n named ports.
func namedPorts(n int) []nv1.NetworkPolicyPort {
	out := make([]nv1.NetworkPolicyPort, n)
	for i := range out {
		out[i] = port("", fmt.Sprintf("n%d", i))
	}
	return out
}

// yOwn is namespace y's own policy: y/b takes x's pods on TCP 80 only.
var yOwn = np("y", "own", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "b"),
	Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{PodSelector: sel(), NamespaceSelector: sel("ns", "x")}},
		Ports: []nv1.NetworkPolicyPort{port("", 80)}}}})

// modelCost is what a full sync of m writes: sets, their elements, the
// clauses of its tiers.
func modelCost(m *policymodel.Model) (sets, elems, clauses int) {
	for _, s := range m.Sets {
		sets++
		elems += s.Len()
	}
	for _, r := range m.AllRules() {
		clauses += len(r.Clauses)
	}
	return sets, elems, clauses
}

// TestNamespaceCapsFailClosed: a namespace whose policies pass a
// namespace cap (sets: two policies of 520 peers each, every one within
// the per-policy caps; clauses: two policies of the same 1,000 peers
// times a numeric and a named port)
// fails closed for its own pods alone: x/a, which its policies isolate,
// takes nothing, not even y's pods that both allow; x/c, which none
// selects, and x's egress are as before; y's policy and pods are as
// without x's. One Issue names the namespace and the cap; none of x's
// sets is in the model, whose cost is that of the model without x's
// policies but x's closed set (x/a, also in the isolated set). Issue 60,
// finding 5: five policies of 4,000 named ports each stalled the node's
// table.
func TestNamespaceCapsFailClosed(t *testing.T) {
	probes := []probe{
		{"y/b", "x/a", policymodel.TCP, 80, false}, {"x/b", "x/a", policymodel.TCP, 80, false},
		{"y/a", "x/c", policymodel.TCP, 80, true}, {"x/a", "z/a", policymodel.TCP, 80, true},
		{"x/a", "y/b", policymodel.TCP, 80, true}, {"x/a", "y/b", policymodel.TCP, 81, false}, {"z/a", "y/b", policymodel.TCP, 80, false},
		{"z/a", "y/a", policymodel.TCP, 80, true},
	}
	for _, tc := range []struct {
		name  string
		nps   []*nv1.NetworkPolicy
		field string
	}{
		{"sets", []*nv1.NetworkPolicy{manyPeers("many0", 520, 0), manyPeers("many1", 520, 520)}, "sets"},
		{"clauses", []*nv1.NetworkPolicy{manyPeers("ports0", 1000, 0, port("", 80), port("", "n0")),
			manyPeers("ports1", 1000, 0, port("", 80), port("", "n0"))}, "clauses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range tc.nps {
				if c := compileNP(p); len(c.issues) != 0 {
					t.Fatalf("%s is past a per-policy cap: %v", p.Name, c.issues)
				}
			}
			m := check(t, testCluster(append(tc.nps, yOwn), nil), probes)
			if len(m.Issues) != 1 || m.Issues[0].Policy != "ns/x" || m.Issues[0].Field != tc.field || !errors.Is(m.Issues[0], policymodel.ErrUnexpressible) {
				t.Fatalf("issues %v, want one of ns/x at %s", m.Issues, tc.field)
			}
			if !strings.Contains(m.Issues[0].Reason, "docs/policy.md, Caps") {
				t.Errorf("the issue does not say where the caps are: %s", m.Issues[0].Reason)
			}
			for _, s := range m.Sets {
				if strings.Contains(s.Key, "podSel={k=") || strings.Contains(s.Key, "port=n") {
					t.Errorf("x's set %q in the model", s.Key)
				}
			}
			var ids []string
			for _, p := range m.Ingress.NetworkPolicy {
				ids = append(ids, p.ID)
				if strings.HasPrefix(p.ID, "np/x/") && (p.ID != "np/x/"+closedName || len(p.Rules) != 0 || !p.FailClosed) {
					t.Errorf("x's policy %s in the tier: %+v", p.ID, p)
				}
			}
			if !slices.Equal(ids, []string{"np/x/" + closedName, "np/y/own"}) {
				t.Errorf("ingress NetworkPolicy tier %v, want x's closed one and y's", ids)
			}
			without := Resolve(testCluster([]*nv1.NetworkPolicy{yOwn}, nil))
			sets, elems, clauses := modelCost(m)
			wsets, welems, wclauses := modelCost(without)
			if sets != wsets+1 || elems != welems+2 || clauses != wclauses {
				t.Errorf("the model holds %d sets, %d elements, %d clauses; without x's policies %d, %d, %d: want x's closed set more, and x/a in it and in the isolated set",
					sets, elems, clauses, wsets, welems, wclauses)
			}
		})
	}
}

// feed is an engine with limits lim holding in, fed as the watcher feeds
// it.
func feed(lim capLimits, in Input) *Engine {
	e := NewEngine(in.Node)
	e.caps.lim = lim
	e.Hold()
	for _, ns := range in.Namespaces {
		e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		e.SetPod(p)
	}
	for _, p := range in.NetworkPolicies {
		e.SetNetworkPolicy(p)
	}
	e.Release()
	return e
}

// TestNamespaceCapOthersUnslowed: with namespace x past its cap, y's
// changes (a policy, a pod, a pod's labels) make the same deltas as on a
// node without x's policies: x's sets are neither in the model nor
// filled again for them, so y's transactions are the size they would be.
func TestNamespaceCapOthersUnslowed(t *testing.T) {
	over := feed(defaultCapLimits, testCluster([]*nv1.NetworkPolicy{manyPeers("many0", 520, 0), manyPeers("many1", 520, 520), yOwn}, nil))
	plain := feed(defaultCapLimits, testCluster([]*nv1.NetworkPolicy{yOwn}, nil))
	if len(over.Model().Issues) != 1 {
		t.Fatalf("issues %v, want x's cap", over.Model().Issues)
	}
	newPod := *testCluster(nil, nil).Pods[4] // y/b
	newPod.Name, newPod.IPs = "d", []netip.Addr{netip.MustParseAddr("10.2.0.9")}
	relabel := newPod
	relabel.Labels = map[string]string{"pod": "b", "tier": "web"}
	for _, c := range []struct {
		name   string
		change func(e *Engine) policymodel.Delta
	}{
		{"y's new policy", func(e *Engine) policymodel.Delta {
			return e.SetNetworkPolicy(np("y", "web", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"),
				Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{PodSelector: sel("pod", "c")}}}}}))
		}},
		{"y's new pod", func(e *Engine) policymodel.Delta { return e.SetPod(&newPod) }},
		{"y's pod relabeled", func(e *Engine) policymodel.Delta { return e.SetPod(&relabel) }},
		{"y's policy deleted", func(e *Engine) policymodel.Delta { return e.DeleteNetworkPolicy("y", "web") }},
	} {
		got, want := c.change(over), c.change(plain)
		if !sameDelta(got, want) {
			t.Errorf("%s: delta %+v; on the node without x's policies %+v", c.name, got, want)
		}
		sets, elems, clauses := modelCost(over.Model())
		wsets, welems, wclauses := modelCost(plain.Model())
		if sets != wsets+1 || elems != welems+2 || clauses != wclauses {
			t.Errorf("%s: the model holds %d sets, %d elements, %d clauses; without x's %d, %d, %d", c.name, sets, elems, clauses, wsets, welems, wclauses)
		}
	}
}

// sameDelta reports whether two deltas make the same change, x's closed
// set aside (its elements move with x's pods only).
func sameDelta(a, b policymodel.Delta) bool {
	count := func(m map[policymodel.SetID][]policymodel.Elem) int {
		n := 0
		for _, es := range m {
			n += len(es)
		}
		return n
	}
	return a.Rules == b.Rules && slices.Equal(a.AddSets, b.AddSets) && slices.Equal(a.DelSets, b.DelSets) &&
		count(a.Add) == count(b.Add) && count(a.Del) == count(b.Del)
}

// TestNodeCaps: past a node cap the namespace that holds the most of it
// is closed on this node (an Issue of ns/<name> at "node sets"), the
// others keep their policies; when the largest shrinks (a policy of it
// deleted) it is measured again and let back in.
func TestNodeCaps(t *testing.T) {
	lim := defaultCapLimits
	lim.nodeSets = 8 // x's policies hold 8 sets, y's 2 (the tiers' own sets are nobody's)
	in := testCluster([]*nv1.NetworkPolicy{manyPeers("big", 5, 0), manyPeers("small", 1, 10), yOwn}, nil)
	e := feed(lim, in)
	m := e.Model()
	if len(m.Issues) != 1 || m.Issues[0].Policy != "ns/x" || m.Issues[0].Field != "node sets" {
		t.Fatalf("issues %v, want ns/x at node sets", m.Issues)
	}
	for _, p := range []probe{{"y/b", "x/a", policymodel.TCP, 80, false}, {"x/a", "y/b", policymodel.TCP, 80, true}, {"z/a", "y/b", policymodel.TCP, 80, false}} {
		if got := reach(m, in, addr(t, p.from), addr(t, p.to), p.proto, p.port); got != p.want {
			t.Errorf("%s -> %s: %v, want %v", p.from, p.to, got, p.want)
		}
	}
	e.DeleteNetworkPolicy("x", "big")
	m = e.Model()
	if len(m.Issues) != 0 {
		t.Fatalf("issues %v after x shrank, want none", m.Issues)
	}
	for _, p := range []probe{{"y/b", "x/a", policymodel.TCP, 80, true}, {"z/a", "x/a", policymodel.TCP, 80, false}, {"z/a", "y/b", policymodel.TCP, 80, false}} {
		if got := reach(m, in, addr(t, p.from), addr(t, p.to), p.proto, p.port); got != p.want {
			t.Errorf("after x shrank: %s -> %s: %v, want %v", p.from, p.to, got, p.want)
		}
	}
}

// TestNamespaceElemsCap: the elements of a namespace's sets are its cost
// too: a policy whose peer takes pods of any namespace labelled grow is
// within the cap until the pods come; the pod that passes it closes the
// namespace in its own change (the rebuild merged into its delta), and
// the next pod of another namespace neither reopens x nor fills its sets.
func TestNamespaceElemsCap(t *testing.T) {
	lim := defaultCapLimits
	lim.nsElems = 4 // x/a in the subject, and three growing pods
	grow := np("x", "grow", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), Ingress: []nv1.NetworkPolicyIngressRule{{
		From: []nv1.NetworkPolicyPeer{{NamespaceSelector: sel(), PodSelector: sel("grow", "yes")}}}}})
	e := feed(lim, testCluster([]*nv1.NetworkPolicy{grow, yOwn}, nil))
	if len(e.Model().Issues) != 0 {
		t.Fatalf("issues %v before the pods came", e.Model().Issues)
	}
	var d policymodel.Delta
	for i := range 4 {
		d = e.SetPod(&Pod{Namespace: "z", Name: fmt.Sprint("g", i), Node: "n2", Labels: map[string]string{"grow": "yes"},
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 3, 1, byte(i)})}})
		if i < 3 && len(e.Model().Issues) != 0 {
			t.Fatalf("pod %d: issues %v within the cap", i, e.Model().Issues)
		}
	}
	m := e.Model()
	if len(m.Issues) != 1 || m.Issues[0].Policy != "ns/x" || m.Issues[0].Field != "elements" {
		t.Fatalf("issues %v, want ns/x at elements", m.Issues)
	}
	if !d.Rules || len(d.DelSets) == 0 {
		t.Errorf("the pod past the cap made the delta %+v: want x's rules and sets gone", d)
	}
	d = e.SetPod(&Pod{Namespace: "y", Name: "late", Node: node, Labels: map[string]string{"grow": "yes"},
		IPs: []netip.Addr{netip.MustParseAddr("10.2.0.77")}})
	if d.Rules || len(d.AddSets) != 0 || len(e.Model().Issues) != 1 {
		t.Errorf("another namespace's pod made %+v (issues %v): x's sets made again", d, e.Model().Issues)
	}
}

// TestNamedPortsOneSet: a rule's named ports are one Ported set and one
// clause per peer, however many it names (issue 60, finding 5: a policy of
// 4,000 named ports was 4,000 sets and, per peer, 4,000 clauses, which a
// full sync of the node's table could not take). Y's pods reach x/a on the
// ports the names resolve to there (serve-80-tcp: TCP 80, web: TCP 80)
// and on no other.
func TestNamedPortsOneSet(t *testing.T) {
	ports := append(namedPorts(4000), port("", "serve-80-tcp"), port("", "web"))
	p := manyPeers("ports", 3, 0, ports...)
	if c := compileNP(p); len(c.issues) != 0 {
		t.Fatalf("a policy of 4,002 named ports and 4 peers is past a cap: %v", c.issues)
	}
	m := check(t, testCluster([]*nv1.NetworkPolicy{p}, nil), []probe{
		{"y/b", "x/a", policymodel.TCP, 80, true}, {"y/b", "x/a", policymodel.TCP, 81, false},
		{"y/b", "x/a", policymodel.UDP, 80, false}, {"x/b", "x/a", policymodel.TCP, 80, false},
	})
	ported := 0
	for _, s := range m.Sets {
		if s.Kind == policymodel.Ported {
			ported++
		}
	}
	_, _, clauses := modelCost(m)
	if ported != 1 || clauses != 4 {
		t.Errorf("%d Ported sets and %d clauses, want 1 and 4 (one clause per peer)", ported, clauses)
	}
}

// planText is what plan decides, as text: the active policies, the
// closed namespaces and on which cap, the open ones' measures.
func planText(p *capPlan) string {
	var b strings.Builder
	b.WriteString("active")
	for _, id := range slices.Sorted(maps.Keys(p.active)) {
		b.WriteString(" " + id)
	}
	for _, ns := range slices.Sorted(maps.Keys(p.closed)) {
		fmt.Fprintf(&b, "\nclosed %s %s", ns, p.closed[ns].Field)
	}
	open := slices.Clone(p.open)
	slices.SortFunc(open, func(a, b *nsLocal) int { return strings.Compare(a.ns, b.ns) })
	for _, l := range open {
		fmt.Fprintf(&b, "\nopen %s clauses %d elems %d sets", l.ns, l.clauses, l.elems)
		for _, id := range slices.Sorted(maps.Keys(l.sets)) {
			fmt.Fprintf(&b, " %s:%d", id, l.sets[id])
		}
	}
	return b.String()
}

// TestNamespaceCountIncremental: the caps' plan of an engine that counted
// each change as it came (nsCount, the selectsLocal it memoised) is the
// plan of the same engine measured afresh, after each of a run of
// changes: policies added one at a time to a namespace until it passes
// its cap of sets and closes, one replaced, some deleted (it opens
// again), a staged one, a pod leaving the node and coming back (a
// policy's only subject), a namespace relabelled, a policy of another
// namespace.
func TestNamespaceCountIncremental(t *testing.T) {
	lim := defaultCapLimits
	lim.nsSets = 9
	e := feed(lim, testCluster(nil, nil))
	peerPolicy := func(name, pod string, first, n int) *nv1.NetworkPolicy {
		var peers []nv1.NetworkPolicyPeer
		for i := range n {
			peers = append(peers, nv1.NetworkPolicyPeer{PodSelector: sel("k", fmt.Sprint(first+i))})
		}
		return np("x", name, nv1.NetworkPolicySpec{PodSelector: *sel("pod", pod), Ingress: []nv1.NetworkPolicyIngressRule{{From: peers}}})
	}
	steps := []struct {
		name   string
		change func()
	}{
		{"add p0", func() { e.SetNetworkPolicy(peerPolicy("p0", "a", 0, 2)) }},
		{"add p1", func() { e.SetNetworkPolicy(peerPolicy("p1", "b", 2, 2)) }},
		{"add p2 shared sets", func() { e.SetNetworkPolicy(peerPolicy("p2", "a", 0, 3)) }},
		{"add p3", func() { e.SetNetworkPolicy(peerPolicy("p3", "c", 10, 2)) }},
		{"add p4 past the cap", func() { e.SetNetworkPolicy(peerPolicy("p4", "a", 20, 4)) }},
		{"replace p4", func() { e.SetNetworkPolicy(peerPolicy("p4", "b", 30, 1)) }},
		{"delete p3", func() { e.DeleteNetworkPolicy("x", "p3") }},
		{"delete p2", func() { e.DeleteNetworkPolicy("x", "p2") }},
		{"staged", func() { e.SetStagedNetworkPolicy(peerPolicy("s0", "c", 40, 1)) }},
		{"x/b leaves", func() {
			p := PodFromAPI(apiPod("x", "b"))
			p.Node = "n2"
			e.SetPod(p)
		}},
		{"x/b back", func() { e.SetPod(PodFromAPI(apiPod("x", "b"))) }},
		{"x/c deleted", func() { e.DeletePod("x", "c") }},
		{"relabel y", func() { e.SetNamespace(&Namespace{Name: "y", Labels: map[string]string{"ns": "y", "k": "1"}}) }},
		{"y's own", func() { e.SetNetworkPolicy(yOwn) }},
		{"delete p0 p1 p4", func() {
			for _, n := range []string{"p0", "p1", "p4"} {
				e.DeleteNetworkPolicy("x", n)
			}
		}},
	}
	closedOnce := false
	for _, s := range steps {
		s.change()
		caps, memo := e.caps, e.selMemo
		e.caps, e.selMemo = nsCaps{lim: caps.lim}, nil
		want := planText(e.planCaps())
		e.caps, e.selMemo = caps, memo
		if got := planText(e.planCaps()); got != want {
			t.Errorf("after %s, the counted plan:\n%s\nwant (measured afresh):\n%s", s.name, got, want)
		}
		closedOnce = closedOnce || strings.Contains(want, "closed x sets")
	}
	if !closedOnce {
		t.Error("x never passed its cap of sets: the run does not try the closed namespace")
	}
}
