package policy

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestNodesPeer: a ClusterNetworkPolicy's `nodes` peer takes the addresses
// of the nodes its selector selects (status.addresses, both families), an
// empty selector every node's; the policy's other subjects and peers are
// as without it; a node relabelled out of the selector leaves the set.
func TestNodesPeer(t *testing.T) {
	infra := &Node{Name: "n-infra", Labels: map[string]string{"role": "infra"},
		IPs: []netip.Addr{netip.MustParseAddr("172.31.0.1"), netip.MustParseAddr("fd00:31::1")}}
	worker := &Node{Name: "n-worker", Labels: map[string]string{"role": "worker"}, IPs: []netip.Addr{netip.MustParseAddr("172.31.0.2")}}
	to := func(action cnpv1.ClusterNetworkPolicyRuleAction, nodes *metav1.LabelSelector) []cnpv1.ClusterNetworkPolicyEgressRule {
		return []cnpv1.ClusterNetworkPolicyEgressRule{{Action: action, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Nodes: nodes}}}}
	}
	for _, tc := range []struct {
		name   string
		cnps   []*cnpv1.ClusterNetworkPolicy
		probes []probe
	}{
		{"deny to the infra nodes", []*cnpv1.ClusterNetworkPolicy{cnp("n", admin, 1, nil, to(deny, sel("role", "infra")))}, []probe{
			{"x/a", "172.31.0.1", policymodel.TCP, 10250, false},
			{"x/a", "fd00:31::1", policymodel.TCP, 10250, false},
			{"x/a", "172.31.0.2", policymodel.TCP, 10250, true}, // another node
			{"y/a", "172.31.0.1", policymodel.TCP, 10250, true}, // not the subject
			{"x/a", "y/a", policymodel.TCP, 80, true},
		}},
		{"an empty selector: every node", []*cnpv1.ClusterNetworkPolicy{cnp("n", admin, 1, nil, to(deny, &metav1.LabelSelector{}))}, []probe{
			{"x/a", "172.31.0.1", policymodel.TCP, 443, false},
			{"x/a", "172.31.0.2", policymodel.TCP, 443, false},
			{"x/a", "192.0.2.1", policymodel.TCP, 443, true}, // not a node's
		}},
		{"accept to the workers before a deny of everything", []*cnpv1.ClusterNetworkPolicy{
			cnp("ok", admin, 1, nil, to(accept, sel("role", "worker"))),
			cnp("no", admin, 2, nil, []cnpv1.ClusterNetworkPolicyEgressRule{{Action: deny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0"}}}}}),
		}, []probe{
			{"x/a", "172.31.0.2", policymodel.TCP, 22, true},
			{"x/a", "172.31.0.1", policymodel.TCP, 22, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testCluster(nil, tc.cnps)
			in.Nodes = []*Node{infra, worker}
			m := check(t, in, tc.probes)
			if len(m.Issues) != 0 {
				t.Errorf("issues %v, want none: the nodes peer is supported", m.Issues)
			}
		})
	}

	// The infra node relabelled a worker, then deleted: its addresses
	// leave the set, as Resolve would have it.
	e := NewEngine(node)
	for _, n := range []*Node{infra, worker} {
		e.SetNode(n)
	}
	e.SetClusterNetworkPolicy(cnp("n", admin, 1, nil, to(deny, sel("role", "infra"))))
	in := testCluster(nil, nil)
	for _, ns := range in.Namespaces {
		e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		e.SetPod(p)
	}
	denied := func(dst string) bool {
		return !e.Model().Evaluate(policymodel.Egress, policymodel.Conn{Src: ip("x", "a"), Dst: netip.MustParseAddr(dst), Proto: policymodel.TCP, Port: 22}).Allowed
	}
	if !denied("172.31.0.1") {
		t.Fatal("the infra node is open before its relabel")
	}
	moved := *infra
	moved.Labels = map[string]string{"role": "worker"}
	if d := e.SetNode(&moved); d.Rules || len(d.AddSets)+len(d.DelSets) > 0 || len(d.Del) == 0 {
		t.Errorf("the relabel's delta %+v: want elements out of the set, nothing else", d)
	}
	if denied("172.31.0.1") {
		t.Error("the node relabelled out of the selector is still denied")
	}
	e.SetNode(infra)
	e.DeleteNode(infra.Name)
	if denied("172.31.0.1") {
		t.Error("the deleted node is still denied")
	}
}

// TestNodeFromAPI: a node's addresses are the IPs of status.addresses,
// once each and sorted; a hostname is none.
func TestNodeFromAPI(t *testing.T) {
	n := NodeFromAPI(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "172.31.0.2"},
			{Type: corev1.NodeHostName, Address: "n1.example"},
			{Type: corev1.NodeExternalIP, Address: "2001:db8::2"},
			{Type: corev1.NodeInternalIP, Address: "::ffff:172.31.0.2"}, // the same, mapped
			{Type: corev1.NodeExternalIP, Address: "192.0.2.9"},
		}}})
	want := []netip.Addr{netip.MustParseAddr("172.31.0.2"), netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::2")}
	if n.Name != "n1" || n.Labels["a"] != "b" || !slices.Equal(n.IPs, want) {
		t.Errorf("NodeFromAPI = %+v, want addresses %v", n, want)
	}
}
