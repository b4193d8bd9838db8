package policy

import (
	"testing"

	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// cnp is a ClusterNetworkPolicy whose subject is the namespace x.
func cnp(name string, tier cnpv1.Tier, prio int32, in []cnpv1.ClusterNetworkPolicyIngressRule, eg []cnpv1.ClusterNetworkPolicyEgressRule) *cnpv1.ClusterNetworkPolicy {
	return &cnpv1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cnpv1.ClusterNetworkPolicySpec{
			Tier: tier, Priority: prio,
			Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: sel("ns", "x")},
			Ingress: in, Egress: eg,
		},
	}
}

// from is one ingress rule from the namespace ns (all of them: "").
func from(action cnpv1.ClusterNetworkPolicyRuleAction, ns string, protos ...cnpv1.ClusterNetworkPolicyProtocol) []cnpv1.ClusterNetworkPolicyIngressRule {
	s := sel()
	if ns != "" {
		s = sel("ns", ns)
	}
	return []cnpv1.ClusterNetworkPolicyIngressRule{{Action: action, From: []cnpv1.ClusterNetworkPolicyIngressPeer{{Namespaces: s}}, Protocols: protos}}
}

const (
	accept = cnpv1.ClusterNetworkPolicyRuleActionAccept
	deny   = cnpv1.ClusterNetworkPolicyRuleActionDeny
	pass   = cnpv1.ClusterNetworkPolicyRuleActionPass
	admin  = cnpv1.AdminTier
	base   = cnpv1.BaselineTier
)

func tcpPort(n int32) cnpv1.ClusterNetworkPolicyProtocol {
	return cnpv1.ClusterNetworkPolicyProtocol{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Number: n}}}
}

// TestClusterNetworkPolicy: the tiers and actions of v1alpha2 around the
// NetworkPolicy tier.
func TestClusterNetworkPolicy(t *testing.T) {
	denyX := np("x", "deny", nv1.NetworkPolicySpec{PolicyTypes: ingressOnly})
	allowX := np("x", "allow", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{}}})
	cases := []struct {
		name   string
		nps    []*nv1.NetworkPolicy
		cnps   []*cnpv1.ClusterNetworkPolicy
		probes []probe
	}{
		{"admin deny beats a NetworkPolicy's allow", []*nv1.NetworkPolicy{allowX},
			[]*cnpv1.ClusterNetworkPolicy{cnp("d", admin, 10, from(deny, "y"), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, false}, {"z/a", "x/a", policymodel.TCP, 80, true}}},
		{"admin accept beats a NetworkPolicy's isolation", []*nv1.NetworkPolicy{denyX},
			[]*cnpv1.ClusterNetworkPolicy{cnp("a", admin, 10, from(accept, "y"), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, true}, {"z/a", "x/a", policymodel.TCP, 80, false}}},
		{"admin pass leaves it to the NetworkPolicy", []*nv1.NetworkPolicy{denyX},
			[]*cnpv1.ClusterNetworkPolicy{cnp("p", admin, 10, from(pass, "y"), nil), cnp("a", admin, 20, from(accept, ""), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, false}, {"z/a", "x/a", policymodel.TCP, 80, true}}},
		{"admin pass without a NetworkPolicy goes to the baseline", nil,
			[]*cnpv1.ClusterNetworkPolicy{cnp("p", admin, 10, from(pass, "y"), nil), cnp("b", base, 10, from(deny, ""), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, false}}},
		{"lower priority value first", nil,
			[]*cnpv1.ClusterNetworkPolicy{cnp("late", admin, 20, from(accept, "y"), nil), cnp("early", admin, 5, from(deny, "y"), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, false}}},
		{"rules in order within a policy", nil,
			[]*cnpv1.ClusterNetworkPolicy{cnp("o", admin, 10, append(from(accept, "y", tcpPort(80)), from(deny, "")...), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, true}, {"y/a", "x/a", policymodel.TCP, 81, false}, {"z/a", "x/a", policymodel.TCP, 80, false}}},
		{"baseline applies to pods no NetworkPolicy selects", []*nv1.NetworkPolicy{
			np("x", "allow-a", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), Ingress: []nv1.NetworkPolicyIngressRule{{}}}),
		}, []*cnpv1.ClusterNetworkPolicy{cnp("b", base, 10, from(deny, ""), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, true}, {"y/a", "x/b", policymodel.TCP, 80, false}}},
		{"baseline pass goes to the default", nil,
			[]*cnpv1.ClusterNetworkPolicy{cnp("p", base, 1, from(pass, "y"), nil), cnp("d", base, 2, from(deny, ""), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, true}, {"z/a", "x/a", policymodel.TCP, 80, false}}},
		{"baseline accept cannot beat a NetworkPolicy's isolation", []*nv1.NetworkPolicy{denyX},
			[]*cnpv1.ClusterNetworkPolicy{cnp("b", base, 1, from(accept, ""), nil)},
			[]probe{{"y/a", "x/a", policymodel.TCP, 80, false}}},
		{"egress networks, port range and named port", nil,
			[]*cnpv1.ClusterNetworkPolicy{cnp("e", admin, 1, nil, []cnpv1.ClusterNetworkPolicyEgressRule{
				{Action: accept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"192.0.2.0/24"}}},
					Protocols: []cnpv1.ClusterNetworkPolicyProtocol{{UDP: &cnpv1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnpv1.Port{Range: &cnpv1.PortRange{Start: 50, End: 60}}}}}},
				{Action: accept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Pods: &cnpv1.NamespacedPod{NamespaceSelector: *sel("ns", "z"), PodSelector: *sel("pod", "b")}}},
					Protocols: []cnpv1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "web"}}},
				{Action: deny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0"}}}},
			})},
			[]probe{
				{"x/a", "192.0.2.7", policymodel.UDP, 53, true}, {"x/a", "192.0.2.7", policymodel.UDP, 61, false}, {"x/a", "192.0.2.7", policymodel.TCP, 53, false},
				{"x/a", "z/b", policymodel.TCP, 8080, true}, {"x/a", "z/b", policymodel.TCP, 80, false}, {"x/a", "z/a", policymodel.TCP, 80, false},
				{"y/a", "z/a", policymodel.TCP, 80, true}, // y is not the subject
			}},
		{"subject pods: namespace and pod selectors", nil,
			[]*cnpv1.ClusterNetworkPolicy{{
				ObjectMeta: metav1.ObjectMeta{Name: "s"},
				Spec: cnpv1.ClusterNetworkPolicySpec{Tier: admin, Subject: cnpv1.ClusterNetworkPolicySubject{
					Pods: &cnpv1.NamespacedPod{NamespaceSelector: metav1.LabelSelector{}, PodSelector: *sel("pod", "c")}},
					Ingress: from(deny, "z")},
			}},
			[]probe{{"z/a", "x/c", policymodel.TCP, 80, false}, {"z/a", "y/c", policymodel.TCP, 80, false}, {"z/a", "x/a", policymodel.TCP, 80, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, testCluster(tc.nps, tc.cnps), tc.probes)
		})
	}
}

// TestTierOrder: the model lists a tier's policies by priority, then name,
// and rules keep their IDs and names.
func TestTierOrder(t *testing.T) {
	m := Resolve(testCluster(nil, []*cnpv1.ClusterNetworkPolicy{
		cnp("b", admin, 5, from(deny, "y"), nil), cnp("a", admin, 5, from(deny, "y"), nil), cnp("c", admin, 1, from(deny, "y"), nil),
		cnp("base", base, 0, from(deny, "y"), nil),
	}))
	var got []string
	for _, p := range m.Ingress.Admin {
		got = append(got, p.ID)
	}
	if want := "[cnp/c cnp/a cnp/b]"; fmtList(got) != want {
		t.Errorf("admin tier %v, want %s", got, want)
	}
	if len(m.Ingress.Baseline) != 1 || len(m.Egress.Admin) != 0 {
		t.Errorf("baseline %d, egress admin %d: want 1, 0", len(m.Ingress.Baseline), len(m.Egress.Admin))
	}
	if r := m.Ingress.Admin[0].Rules[0]; r.ID != "cnp/c/ingress/0" || r.Action != policymodel.Deny {
		t.Errorf("rule %+v", r)
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}
