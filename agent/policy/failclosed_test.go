package policy

import (
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestUnexpressible: input the engine cannot express is an Issue naming the
// field (errors.Is ErrUnexpressible), the policy is marked FailClosed, and
// its pods get the closed form, never more than the policy allows.
func TestUnexpressible(t *testing.T) {
	badSel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pod", Operator: "Near"}}}
	cases := []struct {
		name   string
		nps    []*nv1.NetworkPolicy
		cnps   []*cnpv1.ClusterNetworkPolicy
		field  string
		probes []probe
	}{
		{"bad podSelector isolates the whole namespace", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: *badSel, Ingress: []nv1.NetworkPolicyIngressRule{{}}}),
		}, nil, "spec.podSelector", []probe{{"y/a", "x/a", policymodel.TCP, 80, false}, {"y/a", "x/c", policymodel.TCP, 80, false}, {"x/a", "y/a", policymodel.TCP, 80, true}}},
		{"bad cidr: the peer matches nothing, the others still do", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{
				{IPBlock: &nv1.IPBlock{CIDR: "10.2.0.0/33"}}, {PodSelector: sel("pod", "b")},
			}}}}),
		}, nil, "spec.ingress[0].from[0].ipBlock.cidr", []probe{{"y/a", "x/a", policymodel.TCP, 80, false}, {"x/b", "x/a", policymodel.TCP, 80, true}}},
		{"bad except: the peer matches nothing", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{
				{IPBlock: &nv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.2.0.1"}}},
			}}}}),
		}, nil, "spec.ingress[0].from[0].ipBlock.except[0]", []probe{{"y/b", "x/a", policymodel.TCP, 80, false}}},
		{"endPort with a named port: the rule matches no port, not all", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{Ports: []nv1.NetworkPolicyPort{port("", "web", 90)}}}}),
		}, nil, "spec.ingress[0].ports[0].endPort", []probe{{"y/b", "x/a", policymodel.TCP, 80, false}, {"y/b", "x/a", policymodel.TCP, 90, false}}},
		{"unknown protocol", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{Ports: []nv1.NetworkPolicyPort{port(corev1.Protocol("ICMP"), 80)}}}}),
		}, nil, "spec.ingress[0].ports[0].protocol", []probe{{"y/b", "x/a", policymodel.TCP, 80, false}}},
		{"accept with a domainNames name the API refuses matches nothing", nil, []*cnpv1.ClusterNetworkPolicy{
			cnp("d", admin, 1, nil, []cnpv1.ClusterNetworkPolicyEgressRule{
				{Action: accept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1.DomainName{"*.*.example.com"}}}},
				{Action: deny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0"}}}},
			}),
		}, "spec.egress[0].to[0]", []probe{{"x/a", "192.0.2.1", policymodel.TCP, 443, false}}},
		{"deny with a domainNames peer (Accept only) denies everything", nil, []*cnpv1.ClusterNetworkPolicy{
			cnp("d", admin, 1, nil, []cnpv1.ClusterNetworkPolicyEgressRule{
				{Action: deny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1.DomainName{"example.com"}}}},
			}),
		}, "spec.egress[0].to[0]", []probe{{"x/a", "192.0.2.1", policymodel.TCP, 443, false}, {"x/a", "y/a", policymodel.TCP, 80, false}}},
		{"deny with a nodes peer whose selector cannot be read denies everything", nil, []*cnpv1.ClusterNetworkPolicy{
			cnp("n", admin, 1, nil, []cnpv1.ClusterNetworkPolicyEgressRule{
				{Action: deny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Nodes: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Near"}}}}}},
			}),
		}, "spec.egress[0].to[0]", []probe{{"x/a", "y/a", policymodel.TCP, 80, false}, {"y/a", "z/a", policymodel.TCP, 80, true}}},
		{"pass with a bad port denies everything", nil, []*cnpv1.ClusterNetworkPolicy{
			cnp("p", admin, 1, from(pass, "y", cnpv1.ClusterNetworkPolicyProtocol{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Number: 70000}}}), nil),
		}, "spec.ingress[0].protocols[0]", []probe{{"z/a", "x/a", policymodel.TCP, 80, false}}},
		{"subject with both fields takes every pod and only denies", nil, []*cnpv1.ClusterNetworkPolicy{{
			ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Spec: cnpv1.ClusterNetworkPolicySpec{Tier: admin, Subject: cnpv1.ClusterNetworkPolicySubject{
				Namespaces: sel("ns", "x"), Pods: &cnpv1.NamespacedPod{PodSelector: *sel("pod", "a")}},
				Ingress: from(accept, "y")},
		}}, "spec.subject", []probe{{"y/a", "y/b", policymodel.TCP, 80, false}, {"y/a", "x/a", policymodel.TCP, 80, false}}},
		{"unknown action denies", nil, []*cnpv1.ClusterNetworkPolicy{
			cnp("u", base, 1, from("Allow", "y"), nil),
		}, "spec.ingress[0].action", []probe{{"z/a", "x/a", policymodel.TCP, 80, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := check(t, testCluster(tc.nps, tc.cnps), tc.probes)
			if len(m.Issues) != 1 {
				t.Fatalf("issues %v, want one at %s", m.Issues, tc.field)
			}
			is := m.Issues[0]
			if is.Field != tc.field || !errors.Is(is, policymodel.ErrUnexpressible) {
				t.Errorf("issue %v: field %q, want %q (and errors.Is ErrUnexpressible)", is, is.Field, tc.field)
			}
			for d, p := range m.Policies() {
				if !p.FailClosed {
					t.Errorf("%s %s not marked FailClosed", d, p.ID)
				}
			}
		})
	}
}

// TestHostNetworkAndDonePods: a host-network pod is no policy's subject and
// no selector's peer (its traffic is the node's: an ipBlock matches it); a
// pod that is done leaves the sets.
func TestHostNetworkAndDonePods(t *testing.T) {
	in := testCluster([]*nv1.NetworkPolicy{
		np("x", "from-x", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}}}),
		np("y", "from-node", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{IPBlock: &nv1.IPBlock{CIDR: "192.168.1.10/32"}}}}}}),
	}, nil)
	host := apiPod("x", "h")
	host.Spec.HostNetwork = true
	host.Status.PodIPs = []corev1.PodIP{{IP: "192.168.1.10"}}
	done := apiPod("x", "d")
	done.Status.Phase = corev1.PodSucceeded
	done.Status.PodIPs = []corev1.PodIP{{IP: "10.1.0.99"}}
	in.Pods = append(in.Pods, PodFromAPI(host), PodFromAPI(done))
	m := check(t, in, []probe{
		{"192.168.1.10", "x/a", policymodel.TCP, 80, false}, // not a pod of x to the selector
		{"192.168.1.10", "y/a", policymodel.TCP, 80, true},  // the node's address to the ipBlock
		{"10.1.0.99", "x/a", policymodel.TCP, 80, false},    // the done pod's address is nobody's
		{"x/b", "x/a", policymodel.TCP, 80, true},
	})
	for _, s := range m.Sets {
		for _, a := range []string{"192.168.1.10/32", "10.1.0.99/32"} {
			if s.Kind == policymodel.Addrs && s.Has(policymodel.Elem{Prefix: netip.MustParsePrefix(a)}) {
				t.Errorf("set %s %q holds %s", s.ID, s.Key, a)
			}
		}
	}
}

// TestSubtract: an ipBlock's cidr minus its excepts as prefixes.
func TestSubtract(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		cidr    string
		excepts []string
		want    string
	}{
		{"10.0.0.0/30", []string{"10.0.0.1/32"}, "[10.0.0.0/32 10.0.0.2/31]"},
		{"10.0.0.0/8", []string{"10.0.0.0/8"}, "[]"},
		{"10.0.0.0/24", []string{"192.168.0.0/16"}, "[10.0.0.0/24]"},
		{"fd00::/126", []string{"fd00::3/128", "fd00::/128"}, "[fd00::1/128 fd00::2/128]"},
	} {
		var ex []netip.Prefix
		for _, e := range tc.excepts {
			ex = append(ex, p(e))
		}
		ps, ok := minus(p(tc.cidr), ex, maxElems)
		if !ok {
			t.Fatalf("%s except %v: over %d prefixes", tc.cidr, tc.excepts, maxElems)
		}
		got := "["
		for i, x := range ps {
			if i > 0 {
				got += " "
			}
			got += x.String()
		}
		if got += "]"; got != tc.want {
			t.Errorf("%s except %v: %s, want %s", tc.cidr, tc.excepts, got, tc.want)
		}
	}
}

// TestNodeTraffic: the node's own addresses reach its pods whatever the
// policies (kubelet probes); another node's do not, and a pod's egress to
// the node is evaluated like any address.
func TestNodeTraffic(t *testing.T) {
	in := testCluster([]*nv1.NetworkPolicy{
		np("x", "deny", nv1.NetworkPolicySpec{PolicyTypes: types(nv1.PolicyTypeIngress, nv1.PolicyTypeEgress)}),
	}, []*cnpv1.ClusterNetworkPolicy{cnp("d", admin, 1, from(deny, ""), nil)})
	in.NodeAddrs = []netip.Addr{netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("fd00::1")}
	check(t, in, []probe{
		{"192.168.1.1", "x/a", policymodel.TCP, 8080, true},
		{"192.168.1.2", "x/a", policymodel.TCP, 8080, false},
		{"x/a", "192.168.1.1", policymodel.TCP, 10250, false},
	})
	e := NewEngine(node)
	d := e.SetNodeAddrs(in.NodeAddrs[:1])
	if d.Rules || len(d.Add[e.Model().NodeAddrs]) != 1 {
		t.Errorf("node address delta %+v: want one element, no rule change", d)
	}
}
