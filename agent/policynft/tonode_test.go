package policynft_test

import (
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestPolicyToNode: a pod's connections to the node itself meet the
// policy table's input chain, which judges the pod's egress and, in the
// same walk, an ingress that no node address is subject to: x/a, let out
// to TCP 81 only, reaches the node on 81 and not on 80, IPv4 and IPv6;
// x/b, closed to every connection in, still reaches the node (its own
// ingress is not what it sends), while x/a cannot reach x/b.
func TestPolicyToNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b")
	node := &labPod{ns: "node", name: "node", path: l.nodePath, ip: nodeAddr}
	serve(t, node, false)
	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("x", "out81", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{port(tcp, 81)}}}}))
	n.e.SetNetworkPolicy(np("x", "closed", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}))
	n.start()
	xa, xb := l.pod("x/a"), l.pod("x/b")
	for _, to := range []netip.Addr{nodeAddr, nodeAddr6} {
		if !connect(t, xa, to, policymodel.TCP, 81, allowWait) {
			t.Errorf("x/a does not reach the node's %s:81, which its egress allows", to)
		}
		if connect(t, xa, to, policymodel.TCP, 80, denyWait) {
			t.Errorf("x/a reaches the node's %s:80, which its egress does not allow", to)
		}
		if !connect(t, xb, to, policymodel.TCP, 80, allowWait) {
			t.Errorf("x/b, closed for ingress only, does not reach the node's %s:80", to)
		}
	}
	if connect(t, xa, xb.ip, policymodel.TCP, 81, denyWait) {
		t.Error("x/a reaches x/b:81 under x/closed: the policies are not in force")
	}
}
