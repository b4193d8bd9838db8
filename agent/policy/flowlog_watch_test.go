//go:build !nokube

package policy

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestFlowLogRecord: a logged verdict becomes the record docs/flowlog.md
// shows: the pods of both ends, the policy by kind, namespace, name, tier
// and rule index, and for a drop by isolation the policies that isolate;
// a drop of what conntrack calls INVALID says so (reason "invalid").
func TestFlowLogRecord(t *testing.T) {
	deny := cnpv1.ClusterNetworkPolicy{Spec: cnpv1.ClusterNetworkPolicySpec{Tier: cnpv1.AdminTier, Priority: 5,
		Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: sel("ns", "x")},
		Ingress: []cnpv1.ClusterNetworkPolicyIngressRule{{Action: cnpv1.ClusterNetworkPolicyRuleActionDeny,
			From: []cnpv1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel("ns", "z")}}}}}}
	deny.Name = "no-z"
	e := scaleEngine(testCluster([]*networkingv1.NetworkPolicy{
		np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), PolicyTypes: types(networkingv1.PolicyTypeIngress),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 80)}}}}),
	}, nil))
	e.SetClusterNetworkPolicy(&deny)
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	ev := func(allow bool, counter string, src, dst netip.Addr, dport uint16) loggedflows.Event {
		return loggedflows.Event{Time: at, Allow: allow, Counter: counter, Proto: 6,
			Src: netip.AddrPortFrom(src, 40000), Dst: netip.AddrPortFrom(dst, dport)}
	}
	for _, c := range []struct {
		ev   loggedflows.Event
		want flowlog.Record
	}{
		{ev(true, policymodel.ShortID("np/x/web/ingress/0"), ip("y", "b"), ip("x", "a"), 80), flowlog.Record{
			Verdict: flowlog.Allow, Direction: flowlog.Ingress,
			Policy: &flowlog.Policy{Kind: "NetworkPolicy", Namespace: "x", Name: "web", Rule: "0"}}},
		{ev(false, "iso-in", ip("y", "b"), ip("x", "a"), 81), flowlog.Record{
			Verdict: flowlog.Deny, Direction: flowlog.Ingress,
			Policy: &flowlog.Policy{Kind: "NetworkPolicy", Namespace: "x", Name: "web", Rule: "isolation", Isolating: []string{"web"}}}},
		{ev(false, policymodel.ShortID("cnp/no-z/ingress/0"), ip("z", "c"), ip("x", "a"), 80), flowlog.Record{
			Verdict: flowlog.Deny, Direction: flowlog.Ingress,
			Policy: &flowlog.Policy{Kind: "ClusterNetworkPolicy", Name: "no-z", Tier: "Admin", Rule: "0"}}},
		// conntrack's INVALID (a TCP segment with no flags): dropped before
		// any walk, no policy, no direction
		{ev(false, policymodel.CounterInvalid, ip("z", "c"), ip("x", "a"), 80), flowlog.Record{
			Verdict: flowlog.Deny, Reason: flowlog.ReasonInvalid}},
	} {
		c.want.Time, c.want.Node, c.want.Proto = at, node, "TCP"
		ref := func(a netip.AddrPort) flowlog.Endpoint {
			r := e.podByIP(a.Addr())
			return flowlog.Endpoint{IP: a.Addr(), Port: a.Port(), Namespace: r.Namespace, Pod: r.Name}
		}
		c.want.Src, c.want.Dst = ref(c.ev.Src), ref(c.ev.Dst)
		if c.want.Src.Pod == "" || c.want.Dst.Pod == "" {
			t.Fatalf("the test's pods are unknown: %+v", c.want)
		}
		if got := e.record(c.ev); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v %+v\nwant %+v %+v", c.ev.Counter, got, got.Policy, c.want, c.want.Policy)
		}
	}
}
