package policy

import (
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// ipBlock is a from/to peer of cidr minus excepts.
func ipBlock(cidr string, excepts []netip.Prefix) nv1.NetworkPolicyPeer {
	b := &nv1.IPBlock{CIDR: cidr}
	for _, e := range excepts {
		b.Except = append(b.Except, e.String())
	}
	return nv1.NetworkPolicyPeer{IPBlock: b}
}

// peersOf is n copies of p.
func peersOf[T any](n int, p T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = p
	}
	return out
}

// TestCapsFailClosed: a policy past a cap (excepts, peers, clauses,
// prefixes of its sets; the 4,000-except policies of issue 48 among
// them) is compiled at once into its closed form for the pods it
// selects alone, with one Issue naming the field: a NetworkPolicy
// isolates its pods and allows them nothing (its podSelector peer, which
// would allow y, allows nothing), a ClusterNetworkPolicy's Accept matches
// nothing and its Deny or Pass denies everything to its subject. The
// pods of other namespaces, and another namespace's own policy, are as
// without it; none of the capped policy's sets is in the model.
func TestCapsFailClosed(t *testing.T) {
	fromY := nv1.NetworkPolicyPeer{PodSelector: sel(), NamespaceSelector: sel("ns", "y")}
	in := func(peers ...nv1.NetworkPolicyPeer) nv1.NetworkPolicySpec {
		return nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{From: peers}}}
	}
	// y's own policy: y/b takes x/a's connections on 80 only.
	yPolicy := np("y", "own", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "b"),
		Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{{PodSelector: sel(), NamespaceSelector: sel("ns", "x")}},
			Ports: []nv1.NetworkPolicyPort{port("", 80)}}}})
	others := []probe{{"z/a", "y/b", policymodel.TCP, 80, false}, {"z/a", "y/a", policymodel.TCP, 80, true}, {"y/a", "y/c", policymodel.TCP, 81, true}, {"y/c", "z/b", policymodel.TCP, 80, true}}
	manyPorts := make([]nv1.NetworkPolicyPort, 50)
	for i := range manyPorts {
		manyPorts[i] = port("", 1000+i)
	}
	networks := make([]cnpv1.CIDR, maxElems+1)
	for i := range networks {
		networks[i] = cnpv1.CIDR(netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + byte(i>>16), byte(i >> 8), byte(i)}), 32).String())
	}
	cases := []struct {
		name   string
		nps    []*nv1.NetworkPolicy
		cnps   []*cnpv1.ClusterNetworkPolicy
		field  string
		probes []probe
	}{
		{"::/0 minus 4,000 host addresses", []*nv1.NetworkPolicy{np("x", "big", in(ipBlock("::/0", hosts(4000, 128)), fromY))},
			nil, "spec.ingress[0].from[0].ipBlock.except", []probe{{"y/b", "x/a", policymodel.TCP, 80, false}, {"x/b", "x/a", policymodel.TCP, 80, false},
				{"x/a", "y/b", policymodel.TCP, 80, true}, {"x/a", "y/b", policymodel.TCP, 81, false}}},
		{"0.0.0.0/0 minus 4,000 host addresses", []*nv1.NetworkPolicy{np("x", "big", in(ipBlock("0.0.0.0/0", hosts(4000, 32)), fromY))},
			nil, "spec.ingress[0].from[0].ipBlock.except", []probe{{"y/b", "x/a", policymodel.TCP, 80, false}, {"10.9.9.9", "x/a", policymodel.TCP, 80, false}}},
		{"1,000 excepts leave too many prefixes", []*nv1.NetworkPolicy{np("x", "big", in(fromY, ipBlock("::/0", hosts(1000, 128))))},
			nil, "spec.ingress[0].from[1].ipBlock", []probe{{"y/b", "x/a", policymodel.TCP, 80, false}}},
		{"too many peers", []*nv1.NetworkPolicy{np("x", "big", in(peersOf(maxPeers+1, fromY)...))},
			nil, "spec.ingress[0].from", []probe{{"y/b", "x/a", policymodel.TCP, 80, false}}},
		{"too many clauses", []*nv1.NetworkPolicy{np("x", "big", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{
			{From: peersOf(100, fromY), Ports: manyPorts}}})},
			nil, "spec.ingress[0]", []probe{{"y/b", "x/a", policymodel.TCP, 1000, false}}},
		{"egress only: isolated in egress, ingress untouched", []*nv1.NetworkPolicy{np("x", "big", nv1.NetworkPolicySpec{
			PolicyTypes: egressOnly, Egress: []nv1.NetworkPolicyEgressRule{{To: []nv1.NetworkPolicyPeer{ipBlock("0.0.0.0/0", hosts(1025, 32))}}}})},
			nil, "spec.egress[0].to[0].ipBlock.except", []probe{{"x/a", "y/a", policymodel.TCP, 80, false}, {"y/a", "x/a", policymodel.TCP, 80, true}}},
		{"networks past the cap: Accept matches nothing, Deny denies all", nil, []*cnpv1.ClusterNetworkPolicy{
			cnp("big", admin, 1, from(accept, "y"), []cnpv1.ClusterNetworkPolicyEgressRule{
				{Action: accept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: networks}}},
				{Action: deny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"192.0.2.0/24"}}}},
			})},
			"spec.egress[0].to[0].networks", []probe{{"x/a", "172.16.0.1", policymodel.TCP, 80, false}, {"x/a", "y/a", policymodel.TCP, 80, false}, {"y/a", "x/a", policymodel.TCP, 80, true}}},
		{"peers past the cap: Pass denies all", nil, []*cnpv1.ClusterNetworkPolicy{
			cnp("big", base, 1, []cnpv1.ClusterNetworkPolicyIngressRule{{Action: pass,
				From: peersOf(maxPeers+1, cnpv1.ClusterNetworkPolicyIngressPeer{Namespaces: sel("ns", "z")})}}, nil)},
			"spec.ingress[0].from", []probe{{"y/a", "x/a", policymodel.TCP, 80, false}, {"x/a", "y/a", policymodel.TCP, 80, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// (No time bound: the cap stops the split, and TestMinusLarge
			// bounds what an uncapped one allocates.)
			in := testCluster(append(tc.nps, yPolicy), tc.cnps)
			m := check(t, in, append(tc.probes, others...))
			if len(m.Issues) != 1 || m.Issues[0].Field != tc.field || !errors.Is(m.Issues[0], policymodel.ErrUnexpressible) {
				t.Fatalf("issues %v, want one at %s", m.Issues, tc.field)
			}
			for _, s := range m.Sets {
				if s.Kind == policymodel.CIDRs && s.Len() > 1 {
					t.Errorf("set %s of %d prefixes in the model: the capped policy's sets stay out", s.Key, s.Len())
				}
			}
			for d, p := range m.Policies() {
				if p.FailClosed != (p.ID != "np/y/own") {
					t.Errorf("%s %s: FailClosed %v", d, p.ID, p.FailClosed)
				}
			}
		})
	}
}

// TestCapsAllowWithin: a policy just within the caps is compiled as
// written: its ipBlock allows what its excepts leave.
func TestCapsAllowWithin(t *testing.T) {
	var excepts []netip.Prefix
	for i := range maxExcepts {
		excepts = append(excepts, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), 32))
	}
	excepts = excepts[2:] // 10.2.0.0 and .1 stay
	excepts = append(excepts, netip.MustParsePrefix("10.2.0.3/32"))
	p := np("x", "wide", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{ipBlock("10.0.0.0/8", excepts)},
		Ports: []nv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 80)}}}})
	m := check(t, testCluster([]*nv1.NetworkPolicy{p}, nil), []probe{
		{"y/a", "x/a", policymodel.TCP, 80, true}, {"y/b", "x/a", policymodel.TCP, 80, false}, {"y/c", "x/a", policymodel.TCP, 80, false}, {"10.9.0.1", "x/a", policymodel.TCP, 80, true},
	})
	if len(m.Issues) != 0 {
		t.Errorf("issues %v, want none", m.Issues)
	}
}
