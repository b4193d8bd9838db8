package policy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestNetworkPolicy is a truth table in the manner of the upstream Netpol
// e2e (test/e2e/network/netpol): each case's policies, and connections that
// must or must not pass.
func TestNetworkPolicy(t *testing.T) {
	all := metav1.LabelSelector{}
	podA := *sel("pod", "a")
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	ingress := func(from []nv1.NetworkPolicyPeer, ports ...nv1.NetworkPolicyPort) []nv1.NetworkPolicyIngressRule {
		return []nv1.NetworkPolicyIngressRule{{From: from, Ports: ports}}
	}
	egress := func(to []nv1.NetworkPolicyPeer, ports ...nv1.NetworkPolicyPort) []nv1.NetworkPolicyEgressRule {
		return []nv1.NetworkPolicyEgressRule{{To: to, Ports: ports}}
	}
	cases := []struct {
		name   string
		nps    []*nv1.NetworkPolicy
		probes []probe
	}{
		{"no policy", nil, []probe{
			{"y/b", "x/a", policymodel.TCP, 80, true}, {"x/a", "z/c", policymodel.UDP, 81, true},
		}},
		{"default deny ingress", []*nv1.NetworkPolicy{
			np("x", "deny", nv1.NetworkPolicySpec{PodSelector: all, PolicyTypes: ingressOnly}),
		}, []probe{
			{"y/b", "x/a", policymodel.TCP, 80, false}, {"x/b", "x/a", policymodel.TCP, 80, false}, {"z/a", "x/c", policymodel.UDP, 81, false},
			{"x/a", "y/b", policymodel.TCP, 80, true}, // egress is not isolated
		}},
		{"default deny egress", []*nv1.NetworkPolicy{
			np("x", "deny", nv1.NetworkPolicySpec{PodSelector: all, PolicyTypes: egressOnly}),
		}, []probe{
			{"x/a", "y/b", policymodel.TCP, 80, false}, {"x/a", "x/b", policymodel.TCP, 80, false}, {"y/a", "x/b", policymodel.TCP, 80, true},
		}},
		{"podSelector peer: same namespace only", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}})}),
		}, []probe{
			{"x/b", "x/a", policymodel.TCP, 80, true}, {"y/b", "x/a", policymodel.TCP, 80, false}, {"x/c", "x/a", policymodel.TCP, 80, false},
			{"y/b", "x/b", policymodel.TCP, 80, true}, // x/b is not selected
		}},
		{"namespaceSelector peer", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}})}),
		}, []probe{
			{"y/a", "x/a", policymodel.TCP, 80, true}, {"y/c", "x/a", policymodel.TCP, 80, true}, {"x/b", "x/a", policymodel.TCP, 80, false}, {"z/a", "x/a", policymodel.TCP, 80, false},
		}},
		{"namespaceSelector and podSelector in one peer", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("pod", "b")}})}),
		}, []probe{
			{"y/b", "x/a", policymodel.TCP, 80, true}, {"y/c", "x/a", policymodel.TCP, 80, false}, {"x/b", "x/a", policymodel.TCP, 80, false}, {"z/b", "x/a", policymodel.TCP, 80, false},
		}},
		{"namespaceSelector or podSelector in two peers", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}, {PodSelector: sel("pod", "b")}})}),
		}, []probe{
			{"y/c", "x/a", policymodel.TCP, 80, true}, {"x/b", "x/a", policymodel.TCP, 80, true}, {"x/c", "x/a", policymodel.TCP, 80, false}, {"z/b", "x/a", policymodel.TCP, 80, false},
		}},
		{"empty namespaceSelector: every namespace", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: sel("pod", "b")}})}),
		}, []probe{
			{"z/b", "x/a", policymodel.TCP, 80, true}, {"y/b", "x/a", policymodel.TCP, 80, true}, {"z/c", "x/a", policymodel.TCP, 80, false},
		}},
		{"empty podSelector peer: the policy's namespace", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}})}),
		}, []probe{
			{"x/c", "x/a", policymodel.TCP, 80, true}, {"y/c", "x/a", policymodel.TCP, 80, false},
		}},
		{"rule without peers: from anywhere", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress(nil, port("", 80))}),
		}, []probe{
			{"z/c", "x/a", policymodel.TCP, 80, true}, {"203.0.113.9", "x/a", policymodel.TCP, 80, true}, {"z/c", "x/a", policymodel.TCP, 81, false},
		}},
		{"numeric port and protocol", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress(nil, port(udp, 81))}),
		}, []probe{
			{"y/b", "x/a", policymodel.UDP, 81, true}, {"y/b", "x/a", policymodel.TCP, 81, false}, {"y/b", "x/a", policymodel.UDP, 80, false}, {"y/b", "x/a", policymodel.SCTP, 81, false},
		}},
		{"protocol without port: all its ports", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress(nil, port(udp, nil))}),
		}, []probe{
			{"y/b", "x/a", policymodel.UDP, 81, true}, {"y/b", "x/a", policymodel.UDP, 5353, true}, {"y/b", "x/a", policymodel.TCP, 81, false},
		}},
		{"endPort", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress(nil, port(tcp, 80, 82))}),
		}, []probe{
			{"y/b", "x/a", policymodel.TCP, 80, true}, {"y/b", "x/a", policymodel.TCP, 82, true}, {"y/b", "x/a", policymodel.TCP, 83, false}, {"y/b", "x/a", policymodel.TCP, 79, false},
		}},
		{"SCTP", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress(nil, port(sctp, 80))}),
		}, []probe{
			{"y/b", "x/a", policymodel.SCTP, 80, true}, {"y/b", "x/a", policymodel.TCP, 80, false},
		}},
		{"ingress named port resolved per selected pod", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: all, Ingress: ingress(nil, port("", "web"))}),
		}, []probe{
			{"y/c", "x/a", policymodel.TCP, 80, true}, {"y/c", "x/a", policymodel.TCP, 8080, false},
			{"y/c", "x/b", policymodel.TCP, 8080, true}, {"y/c", "x/b", policymodel.TCP, 80, false},
			{"y/c", "x/a", policymodel.UDP, 80, false}, // web is TCP
		}},
		{"named port with its protocol", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress(nil, port(udp, "serve-81-udp"), port(tcp, "serve-81-udp"))}),
		}, []probe{
			{"y/b", "x/a", policymodel.UDP, 81, true}, {"y/b", "x/a", policymodel.TCP, 81, false},
		}},
		{"egress named port resolved on the destination pod", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, PolicyTypes: egressOnly, Egress: egress([]nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "z")}}, port("", "web"))}),
		}, []probe{
			{"x/a", "z/a", policymodel.TCP, 80, true}, {"x/a", "z/b", policymodel.TCP, 8080, true}, {"x/a", "z/b", policymodel.TCP, 80, false}, {"x/a", "y/a", policymodel.TCP, 80, false},
		}},
		{"egress ipBlock with except", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, PolicyTypes: egressOnly, Egress: egress([]nv1.NetworkPolicyPeer{
				{IPBlock: &nv1.IPBlock{CIDR: "10.3.0.0/16", Except: []string{"10.3.0.2/32"}}},
			})}),
		}, []probe{
			{"x/a", "z/a", policymodel.TCP, 80, true}, {"x/a", "z/b", policymodel.TCP, 80, false}, {"x/a", "z/c", policymodel.UDP, 81, true}, {"x/a", "y/a", policymodel.TCP, 80, false},
		}},
		{"an address in one peer's except and another's cidr is allowed", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, PolicyTypes: egressOnly, Egress: egress([]nv1.NetworkPolicyPeer{
				{IPBlock: &nv1.IPBlock{CIDR: "10.3.0.0/16", Except: []string{"10.3.0.2/32"}}},
				{IPBlock: &nv1.IPBlock{CIDR: "10.3.0.2/32"}},
			})}),
		}, []probe{
			{"x/a", "z/b", policymodel.TCP, 80, true},
		}},
		{"ingress ipBlock matches pod addresses", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{IPBlock: &nv1.IPBlock{CIDR: "10.2.0.0/24"}}})}),
		}, []probe{
			{"y/c", "x/a", policymodel.TCP, 80, true}, {"z/c", "x/a", policymodel.TCP, 80, false},
		}},
		{"policyTypes Egress ignores ingress rules", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, PolicyTypes: egressOnly, Ingress: ingress([]nv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}})}),
		}, []probe{
			{"y/c", "x/a", policymodel.TCP, 80, true}, {"x/a", "y/c", policymodel.TCP, 80, false},
		}},
		{"no policyTypes: egress too when there are egress rules", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, Egress: egress([]nv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}})}),
		}, []probe{
			{"y/c", "x/a", policymodel.TCP, 80, false}, {"x/a", "x/b", policymodel.TCP, 80, true}, {"x/a", "y/b", policymodel.TCP, 80, false},
		}},
		{"empty egress rule allows everything", []*nv1.NetworkPolicy{
			np("x", "p", nv1.NetworkPolicySpec{PodSelector: podA, PolicyTypes: egressOnly, Egress: []nv1.NetworkPolicyEgressRule{{}}}),
		}, []probe{
			{"x/a", "z/c", policymodel.SCTP, 81, true}, {"x/a", "198.51.100.1", policymodel.UDP, 53, true},
		}},
		{"policies add up", []*nv1.NetworkPolicy{
			np("x", "deny", nv1.NetworkPolicySpec{PodSelector: all, PolicyTypes: ingressOnly}),
			np("x", "from-y", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress([]nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}})}),
			np("x", "tcp81", nv1.NetworkPolicySpec{PodSelector: podA, Ingress: ingress(nil, port(tcp, 81))}),
		}, []probe{
			{"y/c", "x/a", policymodel.TCP, 80, true}, {"z/c", "x/a", policymodel.TCP, 81, true}, {"z/c", "x/a", policymodel.TCP, 80, false}, {"y/c", "x/b", policymodel.TCP, 80, false},
		}},
		{"egress deny on the client wins over the server's allow", []*nv1.NetworkPolicy{
			np("x", "deny-egress", nv1.NetworkPolicySpec{PodSelector: all, PolicyTypes: egressOnly}),
			np("y", "allow-all", nv1.NetworkPolicySpec{PodSelector: all, Ingress: []nv1.NetworkPolicyIngressRule{{}}}),
		}, []probe{
			{"x/a", "y/a", policymodel.TCP, 80, false}, {"z/a", "y/a", policymodel.TCP, 80, true},
		}},
		{"remote pods are not subjects", []*nv1.NetworkPolicy{
			np("z", "deny", nv1.NetworkPolicySpec{PodSelector: all, PolicyTypes: types(nv1.PolicyTypeIngress, nv1.PolicyTypeEgress)}),
		}, []probe{
			{"x/a", "z/a", policymodel.TCP, 80, true}, // z/a's own node enforces its policy
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, testCluster(tc.nps, nil), tc.probes)
		})
	}
}
