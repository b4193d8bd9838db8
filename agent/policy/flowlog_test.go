package policy

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestFlowLogScope: a namespace annotated deny puts its pods (of every
// node) in the set the deny verdicts are logged for; another pod of it
// joins the set; the annotation removed takes the set and the scope away;
// the agent's --flow-log logs everywhere.
func TestFlowLogScope(t *testing.T) {
	e := NewEngine(node)
	e.SetFlowLog(FlowLogSetting{}) // on; the namespaces say where
	in := testCluster(nil, nil)
	for _, ns := range in.Namespaces {
		e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		e.SetPod(p)
	}
	if m := e.Model(); m.Log.Allow.On() || m.Log.Deny.On() {
		t.Fatalf("no annotation, no flag: logged %+v", m.Log)
	}
	d := e.SetNamespace(&Namespace{Name: "z", Labels: map[string]string{"ns": "z"}, FlowLog: FlowLogSetting{Deny: true}})
	m := e.Model()
	id := m.Log.Deny.Set
	if m.Log.Allow.On() || id == "" || !d.Rules {
		t.Fatalf("z annotated deny: log %+v, delta %+v", m.Log, d)
	}
	for _, name := range podNames {
		if !m.Sets[id].Contains(ip("z", name)) {
			t.Errorf("z/%s (node n2) is not in the deny log set %v", name, m.Sets[id].Elems())
		}
	}
	if m.Sets[id].Contains(ip("x", "a")) {
		t.Error("x/a is in z's deny log set")
	}
	p := PodFromAPI(apiPod("z", "a"))
	p.Name, p.IPs = "d", []netip.Addr{ip("z", "c").Next()}
	d = e.SetPod(p)
	if !e.Model().Sets[id].Contains(p.IPs[0]) || len(d.Add[id]) != 1 {
		t.Errorf("a new pod of z is not added to the deny log set: delta %+v", d)
	}
	d = e.SetNamespace(&Namespace{Name: "z", Labels: map[string]string{"ns": "z"}})
	if m := e.Model(); m.Log.Deny.On() || m.Sets[id] != nil || !slices.Contains(d.DelSets, id) {
		t.Errorf("annotation removed: log %+v, delta %+v", m.Log, d)
	}
	e.SetFlowLog(FlowLogSetting{Allow: true})
	if m := e.Model(); !m.Log.Allow.All || m.Log.Deny.On() {
		t.Errorf("--flow-log=allow: %+v", m.Log)
	}
}

// TestParseVerdicts: the annotation's and the flag's values.
func TestParseVerdicts(t *testing.T) {
	for in, want := range map[string]FlowLogSetting{"": {}, "deny": {Deny: true}, "allow": {Allow: true},
		"allow,deny": {true, true}, " deny , allow ": {true, true}} {
		if got, ok := ParseFlowLogSetting(in); !ok || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"drop", "allow;deny", "all", "allow,"} {
		if _, ok := ParseFlowLogSetting(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestDescribe: a logged rule's counter names its policy, direction and
// index, and the packet's addresses their pods; the isolation's counter
// names the NetworkPolicies that isolate the pod.
func TestDescribe(t *testing.T) {
	e := scaleEngine(testCluster([]*networkingv1.NetworkPolicy{
		np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), PolicyTypes: types(networkingv1.PolicyTypeIngress),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 80)}},
				{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 81)}}}}),
	}, nil))
	v, ok := e.Describe(policymodel.ShortID("np/x/web/ingress/1"), ip("z", "b"), ip("x", "a"))
	want := Attribution{Direction: policymodel.Ingress, Policy: "np/x/web", Tier: policymodel.TierNetworkPolicy, Rule: 1,
		Src: PodRef{"z", "b"}, Dst: PodRef{"x", "a"}}
	if !ok || !reflect.DeepEqual(v, want) {
		t.Errorf("rule 1 of np/x/web: %+v %v, want %+v", v, ok, want)
	}
	v, ok = e.Describe("iso-in", netip.MustParseAddr("192.0.2.1"), ip("x", "a"))
	want = Attribution{Direction: policymodel.Ingress, Isolating: []string{"np/x/web"}, Dst: PodRef{"x", "a"}}
	if !ok || !reflect.DeepEqual(v, want) {
		t.Errorf("isolation: %+v %v, want %+v", v, ok, want)
	}
	if _, ok := e.Describe("0123456789abcdef", ip("x", "b"), ip("x", "a")); ok {
		t.Error("an unknown counter described")
	}
	// A pod that comes later is named; one that left is not.
	p := PodFromAPI(apiPod("y", "a"))
	p.Name, p.IPs = "new", []netip.Addr{netip.MustParseAddr("10.2.0.9")}
	e.SetPod(p)
	e.DeletePod("z", "b")
	v, _ = e.Describe("iso-in", netip.MustParseAddr("10.2.0.9"), ip("z", "b"))
	if v.Src != (PodRef{"y", "new"}) || v.Dst != (PodRef{}) {
		t.Errorf("after the pods changed: src %+v dst %+v", v.Src, v.Dst)
	}
}

// TestNamespaceFlowLogAnnotation: the annotation read from the API; a
// value that does not parse asks for nothing and is kept for the warning.
func TestNamespaceFlowLogAnnotation(t *testing.T) {
	ns := func(v string) *corev1.Namespace {
		n := &corev1.Namespace{}
		n.Name, n.Annotations = "x", map[string]string{FlowLogAnnotation: v}
		return n
	}
	if got := NamespaceFromAPI(ns("deny")); got.FlowLog != (FlowLogSetting{Deny: true}) || got.FlowLogBad != "" {
		t.Errorf("deny: %+v", got)
	}
	if got := NamespaceFromAPI(ns("drop")); got.FlowLog != (FlowLogSetting{}) || got.FlowLogBad != "drop" {
		t.Errorf("drop: %+v", got)
	}
}
