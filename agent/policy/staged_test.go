//go:build !nokube

package policy

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestStagedPolicy: a staged NetworkPolicy is in the staged rules, never
// in the enforced ones: the enforced model allows what the staged one
// would deny; the table logs its subjects' verdicts; removed, the staged
// rules are gone.
func TestStagedPolicy(t *testing.T) {
	e := scaleEngine(testCluster(nil, nil))
	e.SetFlowLog(FlowLogSetting{})
	onlyWeb := np("x", "only-web", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), PolicyTypes: types(networkingv1.PolicyTypeIngress),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 80)}}}})
	d := e.SetStagedNetworkPolicy(onlyWeb)
	m := e.Model()
	c81 := policymodel.Conn{Src: ip("y", "b"), Dst: ip("x", "a"), Proto: policymodel.TCP, Port: 81}
	c80 := c81
	c80.Port = 80
	if v := m.Evaluate(policymodel.Ingress, c81); !v.Allowed {
		t.Errorf("enforced: y/b -> x/a:81 %+v: a staged policy is enforced", v)
	}
	if m.Staged == nil {
		t.Fatal("no staged rules")
	}
	staged := &policymodel.Model{Rules: *m.Staged, Sets: m.Sets}
	if v := staged.Evaluate(policymodel.Ingress, c81); v.Allowed || v.Rule != "" {
		t.Errorf("staged: y/b -> x/a:81 %+v, want dropped by the staged policy's isolation", v)
	}
	if v := staged.Evaluate(policymodel.Ingress, c80); !v.Allowed || v.Rule != "snp/x/only-web/ingress/0" {
		t.Errorf("staged: y/b -> x/a:80 %+v, want allowed by snp/x/only-web/ingress/0", v)
	}
	for _, p := range m.Ingress.NetworkPolicy {
		if IsStaged(p.ID) {
			t.Errorf("staged policy %s in the enforced tiers", p.ID)
		}
	}
	if id := m.Log.Staged; id == "" || !m.Sets[id].Contains(ip("x", "a")) || m.Sets[id].Contains(ip("x", "b")) || !d.Rules {
		t.Errorf("staged subjects: log %+v (delta %+v): want x/a alone logged", m.Log, d)
	}
	e.DeleteStagedNetworkPolicy("x", "only-web")
	if m := e.Model(); m.Staged != nil || m.Log.Staged != "" {
		t.Errorf("deleted: staged %+v, log %+v", m.Staged, m.Log)
	}
}

// TestStagedRecords: a connection the default allowed that a staged
// NetworkPolicy would drop makes one staged-deny record naming it (and no
// allow record: the namespace does not log); one it would allow too makes
// none; a logged allow of an enforced policy is recorded as such, and no
// staged record where the staged rules allow it as well.
func TestStagedRecords(t *testing.T) {
	e := scaleEngine(testCluster(nil, nil))
	e.SetFlowLog(FlowLogSetting{})
	e.SetStagedNetworkPolicy(np("x", "only-web", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), PolicyTypes: types(networkingv1.PolicyTypeIngress),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 80)}}}}))
	ev := func(allow bool, counter string, dport uint16) loggedflows.Event {
		return loggedflows.Event{Time: time.Now(), Allow: allow, Counter: counter, Proto: 6,
			Src: netip.AddrPortFrom(ip("y", "b"), 40000), Dst: netip.AddrPortFrom(ip("x", "a"), dport)}
	}
	recs := e.appendRecords(nil, ev(true, "dflt-in", 81))
	want := flowlog.Policy{Kind: "StagedNetworkPolicy", Namespace: "x", Name: "only-web", Rule: "isolation", Isolating: []string{"only-web"}}
	if len(recs) != 1 || recs[0].Verdict != flowlog.StagedDeny || recs[0].Policy == nil || !reflect.DeepEqual(*recs[0].Policy, want) ||
		recs[0].Src.Pod != "b" || recs[0].Dst.Pod != "a" {
		t.Errorf("y/b -> x/a:81, allowed by default: %+v, want one staged-deny by %+v", recs, want)
	}
	if recs := e.appendRecords(nil, ev(true, "dflt-in", 80)); len(recs) != 0 {
		t.Errorf("y/b -> x/a:80, which the staged policy allows too: %+v, want nothing", recs)
	}
	e.SetFlowLog(FlowLogSetting{Allow: true})
	e.SetNetworkPolicy(np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), PolicyTypes: types(networkingv1.PolicyTypeIngress),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 81)}}}}))
	recs = e.appendRecords(nil, ev(true, policymodel.ShortID("np/x/web/ingress/0"), 81))
	// NetworkPolicies add up: np/x/web allows 81 with the staged one too.
	if len(recs) != 1 || recs[0].Verdict != flowlog.Allow || recs[0].Policy.Name != "web" {
		t.Errorf("y/b -> x/a:81 allowed by np/x/web, logged everywhere: %+v, want the allow alone", recs)
	}
}
