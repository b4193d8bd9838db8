package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// mirror is what a consumer of the deltas holds: the sets' elements.
type mirror map[policymodel.SetID]map[policymodel.Elem]bool

// apply applies d to the mirror, taking new sets' elements from m.
func (mi mirror) apply(t *testing.T, m *policymodel.Model, d policymodel.Delta) {
	t.Helper()
	for _, id := range d.AddSets {
		if mi[id] != nil {
			t.Fatalf("delta adds set %s, which is there", id)
		}
		mi[id] = map[policymodel.Elem]bool{}
		for _, e := range m.Sets[id].Elems() {
			mi[id][e] = true
		}
	}
	for id, es := range d.Add {
		for _, e := range es {
			if mi[id] == nil || mi[id][e] {
				t.Fatalf("delta adds %v to %s: set missing or element there", e, id)
			}
			mi[id][e] = true
		}
	}
	for id, es := range d.Del {
		for _, e := range es {
			if !mi[id][e] {
				t.Fatalf("delta deletes %v from %s: not there", e, id)
			}
			delete(mi[id], e)
		}
	}
	for _, id := range d.DelSets {
		delete(mi, id)
	}
}

func (mi mirror) equal(m *policymodel.Model) error {
	if len(mi) != len(m.Sets) {
		return fmt.Errorf("mirror has %d sets, model %d", len(mi), len(m.Sets))
	}
	for id, s := range m.Sets {
		got := make([]policymodel.Elem, 0, len(mi[id]))
		for e := range mi[id] {
			got = append(got, e)
		}
		slices.SortFunc(got, policymodel.CompareElem)
		if !slices.Equal(got, s.Elems()) {
			return fmt.Errorf("set %s %q: mirror %v, model %v", id, s.Key, got, s.Elems())
		}
	}
	return nil
}

// TestEngineIncremental: after each of many random changes, the engine's
// model is what Resolve makes of the same input from scratch, and the
// deltas, applied in order, give its sets; a pod's or a namespace's change
// changes elements only. Now and then the engine is held (Hold) for a run
// of changes: on Release, the same holds.
func TestEngineIncremental(t *testing.T) {
	nps := []*nv1.NetworkPolicy{
		np("x", "deny", nv1.NetworkPolicySpec{PolicyTypes: types(nv1.PolicyTypeIngress, nv1.PolicyTypeEgress)}),
		np("x", "web", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), Ingress: []nv1.NetworkPolicyIngressRule{{
			From:  []nv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "blue"), PodSelector: sel("pod", "b")}},
			Ports: []nv1.NetworkPolicyPort{port("", "web")},
		}}}),
		np("y", "out", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "c"), Egress: []nv1.NetworkPolicyEgressRule{{
			To: []nv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}, Ports: []nv1.NetworkPolicyPort{port("", "web")},
		}}}),
	}
	cnps := []*cnpv1.ClusterNetworkPolicy{
		cnp("blue", admin, 3, []cnpv1.ClusterNetworkPolicyIngressRule{{Action: deny, From: []cnpv1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel("team", "blue")}}}}, nil),
		cnp("named", base, 1, nil, []cnpv1.ClusterNetworkPolicyEgressRule{{Action: accept,
			To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Pods: &cnpv1.NamespacedPod{PodSelector: *sel("pod", "a")}}}, Protocols: []cnpv1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "web"}}}}),
		// Of every namespace's pods.
		{ObjectMeta: metav1.ObjectMeta{Name: "infra"}, Spec: cnpv1.ClusterNetworkPolicySpec{Tier: admin, Priority: 5,
			Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			Egress: []cnpv1.ClusterNetworkPolicyEgressRule{{Action: deny,
				To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Nodes: sel("role", "infra")}, {Nodes: &metav1.LabelSelector{}}}}}}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	in := testCluster(nil, nil)
	pods := map[string]*Pod{}
	nss := map[string]*Namespace{}
	nodes := map[string]*Node{}
	e := NewEngine(node)
	mi := mirror{}
	for id, s := range e.Model().Sets {
		mi[id] = map[policymodel.Elem]bool{}
		for _, x := range s.Elems() {
			mi[id][x] = true
		}
	}
	npOn, cnpOn := make([]bool, len(nps)), make([]bool, len(cnps))
	holdUntil, holds := -1, 0
	for step := 0; step < 900; step++ {
		var d policymodel.Delta
		var what string
		elemsOnly := true
		before := tierIDs(e.Model())
		if holdUntil < step && rng.IntN(40) == 0 {
			holdUntil, holds = step+1+rng.IntN(30), holds+1
			e.Hold()
		}
		held := step < holdUntil
		switch r := rng.IntN(11); {
		case r < 5: // a pod comes or changes
			p := *in.Pods[rng.IntN(len(in.Pods))]
			p.Labels = map[string]string{"pod": podNames[rng.IntN(3)]}
			p.Node = []string{node, "n2"}[rng.IntN(2)]
			p.IPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 9, 0, byte(rng.IntN(6))})} // addresses collide
			p.HostNetwork, p.Done = rng.IntN(8) == 0, rng.IntN(8) == 0
			what = fmt.Sprintf("set pod %s %v %s %v", p.Key(), p.Labels, p.Node, p.IPs)
			pods[p.Key()] = &p
			d = e.SetPod(&p)
		case r < 6:
			p := in.Pods[rng.IntN(len(in.Pods))]
			what = "delete pod " + p.Key()
			delete(pods, p.Key())
			d = e.DeletePod(p.Namespace, p.Name)
		case r < 8:
			name := nsNames[rng.IntN(3)]
			ns := &Namespace{Name: name, Labels: map[string]string{"ns": name, "team": []string{"blue", "red"}[rng.IntN(2)]}}
			what = fmt.Sprintf("set namespace %s %v", ns.Name, ns.Labels)
			nss[ns.Name] = ns
			d = e.SetNamespace(ns)
		case r < 9:
			elemsOnly = false
			i := rng.IntN(len(nps))
			npOn[i] = !npOn[i]
			what = fmt.Sprintf("networkpolicy %s on=%v", nps[i].Name, npOn[i])
			if npOn[i] {
				d = e.SetNetworkPolicy(nps[i])
			} else {
				d = e.DeleteNetworkPolicy(nps[i].Namespace, nps[i].Name)
			}
		case r < 10:
			n := &Node{Name: fmt.Sprintf("node-%d", rng.IntN(3)), Labels: map[string]string{"role": []string{"infra", "worker"}[rng.IntN(2)]}}
			for range rng.IntN(3) { // addresses collide across nodes
				if a := netip.AddrFrom4([4]byte{172, 31, 0, byte(rng.IntN(4))}); !slices.Contains(n.IPs, a) {
					n.IPs = append(n.IPs, a)
				}
			}
			slices.SortFunc(n.IPs, netip.Addr.Compare)
			if rng.IntN(4) == 0 {
				what = "delete node " + n.Name
				delete(nodes, n.Name)
				d = e.DeleteNode(n.Name)
				break
			}
			what = fmt.Sprintf("set node %s %v %v", n.Name, n.Labels, n.IPs)
			nodes[n.Name] = n
			d = e.SetNode(n)
		default:
			elemsOnly = false
			i := rng.IntN(len(cnps))
			cnpOn[i] = !cnpOn[i]
			what = fmt.Sprintf("clusternetworkpolicy %s on=%v", cnps[i].Name, cnpOn[i])
			if cnpOn[i] {
				d = e.SetClusterNetworkPolicy(cnps[i])
			} else {
				d = e.DeleteClusterNetworkPolicy(cnps[i].Name)
			}
		}
		// A pod or namespace change is elements only, unless it makes a
		// policy select its first pod of this node or its last one leave.
		if elemsOnly && slices.Equal(before, tierIDs(e.Model())) && (d.Rules || len(d.AddSets)+len(d.DelSets) > 0) {
			t.Fatalf("step %d %s: delta changes rules or sets: %+v", step, what, d)
		}
		if held && (d.Rules || len(d.AddSets)+len(d.DelSets) > 0) {
			t.Fatalf("step %d %s: held, the delta changes rules or sets: %+v", step, what, d)
		}
		mi.apply(t, e.Model(), d)
		if step+1 == holdUntil {
			what += ", then release"
			r := e.Release()
			mi.apply(t, e.Model(), r)
		}
		if err := mi.equal(e.Model()); err != nil {
			t.Fatalf("step %d %s: %v", step, what, err)
		}
		if held && step+1 < holdUntil {
			continue // the model is the last rebuild's
		}
		want := Input{Node: node}
		for _, p := range pods {
			want.Pods = append(want.Pods, p)
		}
		for _, ns := range nss {
			want.Namespaces = append(want.Namespaces, ns)
		}
		for _, n := range nodes {
			want.Nodes = append(want.Nodes, n)
		}
		for i, on := range npOn {
			if on {
				want.NetworkPolicies = append(want.NetworkPolicies, nps[i])
			}
		}
		for i, on := range cnpOn {
			if on {
				want.ClusterNetworkPolicies = append(want.ClusterNetworkPolicies, cnps[i])
			}
		}
		if got, w := dump(e.Model()), dump(Resolve(want)); got != w {
			t.Fatalf("step %d %s: incremental model\n%s\nfrom scratch\n%s", step, what, got, w)
		}
	}
	if holds < 10 {
		t.Fatalf("the engine was held %d times: too few to tell", holds)
	}

}

// TestSetIDsStable: a set's ID depends on its definition only, so two
// agents, or one across a restart, name it the same.
func TestSetIDsStable(t *testing.T) {
	a := Resolve(testCluster([]*nv1.NetworkPolicy{np("x", "p", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a")})}, nil))
	b := Resolve(testCluster([]*nv1.NetworkPolicy{np("x", "q", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a")})}, nil))
	if a.Ingress.NetworkPolicy[0].Subject != b.Ingress.NetworkPolicy[0].Subject {
		t.Errorf("same selector, subjects %s and %s", a.Ingress.NetworkPolicy[0].Subject, b.Ingress.NetworkPolicy[0].Subject)
	}
}

// tierIDs are the IDs of the policies in m's tiers, sorted.
func tierIDs(m *policymodel.Model) []string {
	var out []string
	for _, p := range m.Policies() {
		out = append(out, p.ID)
	}
	slices.Sort(out)
	return out
}

// TestPolicyWithoutNamespace: a NetworkPolicy without a namespace (no API
// server sends one; a hand-built Input can) selects nothing and panics
// nothing.
func TestPolicyWithoutNamespace(t *testing.T) {
	p := np("", "loose", nv1.NetworkPolicySpec{PolicyTypes: ingressOnly})
	m := Resolve(Input{Node: node, Pods: []*Pod{{Namespace: "x", Name: "a", Node: node, IPs: []netip.Addr{netip.MustParseAddr("10.1.0.1")}}},
		NetworkPolicies: []*nv1.NetworkPolicy{p}})
	if len(m.Ingress.NetworkPolicy) != 0 {
		t.Errorf("a policy without a namespace selects a pod: %+v", m.Ingress.NetworkPolicy)
	}
}
