package policynft_test

import (
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPolicyRestart: the agent goes away (its Sink closed, nothing torn
// down): the kernel keeps isolating the selected pod. Meanwhile a policy
// is deleted and another made; the next agent's engine, before its first
// sync, leaves the old table in force (closed), and its first full sync
// replaces it in one transaction: the deleted policy's chains, sets and
// counters are gone, and traffic follows the new model.
func TestPolicyRestart(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a")
	xa, xb, ya := l.pod("x/a"), l.pod("x/b"), l.pod("y/a")
	n := newNode(t, l)
	denyX := np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress, Ingress: []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}}, Ports: []networkingv1.NetworkPolicyPort{port(tcp, 81)},
	}}})
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(denyX) })
	n.start()
	if connect(t, ya, xa.ip, policymodel.TCP, 80, denyWait) {
		t.Fatal("y/a reaches x/a under deny-all")
	}
	must(t, n.sink.Close()) // the agent is killed

	if connect(t, ya, xa.ip, policymodel.TCP, 80, denyWait) || connect(t, xb, xa.ip, policymodel.TCP, 80, denyWait) {
		t.Fatal("x/a is open while the agent is down")
	}

	// The next agent: the API now has no deny-all but a policy isolating
	// y/a from x/b only.
	n2 := &node{t: t, e: policy.NewEngine("n1")}
	var err error
	n2.sink, err = policynft.New(l.nodePath)
	must(t, err)
	defer n2.sink.Close()
	fresh := newNode(t, l) // its engine holds the pods; its sink is unused
	n2.e = fresh.e
	// The watcher feeds the engine while its informers list, and hands
	// the sink nothing until they have synced.
	n2.e.SetNetworkPolicy(np("y", "only-a", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "x"), PodSelector: sel("app", "a")}}}}}))
	// Informers not synced yet: the old table decides.
	if connect(t, ya, xa.ip, policymodel.TCP, 80, denyWait) {
		t.Fatal("x/a open before the new agent's first sync")
	}
	n2.start()
	l.checkTraffic(t, n2.e.Model())
	if !connect(t, ya, xa.ip, policymodel.TCP, 80, allowWait) || connect(t, xb, ya.ip, policymodel.TCP, 80, denyWait) {
		t.Error("after the first sync the table does not follow the new policies")
	}

	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	sets, err := h.PolicySets()
	must(t, err)
	var want []string
	for id := range n2.e.Model().Sets {
		want = append(want, string(id))
	}
	want = append(want, "guard", nft.PolicyPending, nft.PolicyAttached)
	slices.Sort(want)
	if !slices.Equal(sets, want) {
		t.Errorf("sets after the sync %v, want the model's %v", sets, want)
	}
	counters, err := h.PolicyCounters()
	must(t, err)
	if _, ok := counters[policymodel.CounterName(policymodel.RuleID("np/x/deny/ingress/0").Key())]; ok {
		t.Error("the deleted policy's counter lingers")
	}
	if _, ok := counters[policymodel.CounterName(policymodel.RuleID("np/y/only-a/ingress/0").Key())]; !ok {
		t.Errorf("no counter of the new policy's rule in %v", counters)
	}
	// Idempotent: a second full sync changes no rule handle.
	before, err := h.PolicyRuleHandles()
	must(t, err)
	must(t, h.ApplyPolicy(policynft.Change(n2.e.Model(), policymodel.Delta{}, true)))
	after, err := h.PolicyRuleHandles()
	must(t, err)
	if len(before) != len(after) {
		t.Errorf("a second full sync: %d rules, before %d", len(after), len(before))
	}
}
