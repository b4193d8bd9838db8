package policy

import (
	"net/netip"
	"slices"
	"testing"

	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestDomainNamesPeer: an Admin policy of namespace x that accepts
// *.example.com and example.org on TCP 443 and denies the rest of the
// world: the model names the peer (its names normalized, its Pairs set,
// its policy's subject: x's pods of the node), a destination is reached
// only by a pod that resolved it (its pair in the set) and only on 443;
// another pod's pair opens nothing for x/a; pods outside the subject are
// as without the policy.
func TestDomainNamesPeer(t *testing.T) {
	tcp443 := []cnpv1.ClusterNetworkPolicyProtocol{{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Number: 443}}}}
	in := testCluster(nil, []*cnpv1.ClusterNetworkPolicy{cnp("dns", admin, 1, nil, []cnpv1.ClusterNetworkPolicyEgressRule{
		{Action: accept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1.DomainName{"*.Example.com", "example.org.", "example.org"}}}, Protocols: tcp443},
		{Action: deny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0"}}}},
	})})
	for _, ns := range in.Namespaces {
		ns.Labels["kubernetes.io/metadata.name"] = ns.Name
	}
	in.ClusterNetworkPolicies[0].Spec.Subject = cnpv1.ClusterNetworkPolicySubject{Namespaces: sel("ns", "x")}
	m := Resolve(in)
	if len(m.Domains) != 1 || !slices.Equal(m.Domains[0].Names, []string{"*.example.com", "example.org"}) {
		t.Fatalf("Domains %+v, want one peer with [*.example.com example.org]", m.Domains)
	}
	d := m.Domains[0]
	pairs, subject := m.Sets[d.Set], m.Sets[d.Subject]
	if pairs == nil || pairs.Kind != policymodel.Pairs || pairs.Len() != 0 {
		t.Fatalf("the peer's set %+v: want an empty Pairs set", pairs)
	}
	if subject == nil || !subject.Contains(ip("x", "a")) || subject.Contains(ip("y", "a")) {
		t.Fatalf("the peer's subject %v: want x's pods", subject)
	}
	server := netip.MustParseAddr("192.0.2.10")
	egress := func(from string, port uint16) bool {
		return m.Evaluate(policymodel.Egress, policymodel.Conn{Src: addr(t, from), Dst: server, Proto: policymodel.TCP, Port: port}).Allowed
	}
	if egress("x/a", 443) {
		t.Error("x/a reaches 192.0.2.10 before resolving it")
	}
	pairs.Add(policymodel.PairElem(ip("x", "b"), server)) // x/b resolved it
	if egress("x/a", 443) || !egress("x/b", 443) || egress("x/b", 80) {
		t.Errorf("x/b resolved 192.0.2.10: x/a %v (want false), x/b on 443 %v (want true), on 80 %v (want false)",
			egress("x/a", 443), egress("x/b", 443), egress("x/b", 80))
	}
	if !egress("y/a", 80) {
		t.Error("y/a, outside the subject, denied")
	}
	// The node's table answers the same through a Membership.
	if v, err := m.Rules.Evaluate(policymodel.Egress, policymodel.Conn{Src: ip("x", "b"), Dst: server, Proto: policymodel.TCP, Port: 443}, pairMembership{m}); err != nil || !v.Allowed {
		t.Errorf("through a Membership: %+v, %v", v, err)
	}
}

type pairMembership struct{ m *policymodel.Model }

func (p pairMembership) Has(id policymodel.SetID, e policymodel.Elem) (bool, error) {
	s := p.m.Sets[id]
	if s == nil {
		return false, nil
	}
	if e.Src.IsValid() || e.Proto != 0 {
		return s.Has(e), nil
	}
	return s.Contains(e.Prefix.Addr()), nil
}

func TestDomainName(t *testing.T) {
	for n, want := range map[string]string{
		"example.com": "example.com", "*.Example.COM.": "*.example.com", "a_b.example.com": "a_b.example.com",
		"com": "", "*.*.example.com": "", "exa mple.com": "", "example.*": "", "-a.example.com": "", "": "",
	} {
		got, ok := domainName(n)
		if ok != (want != "") || got != want {
			t.Errorf("domainName(%q) = %q, %v; want %q", n, got, ok, want)
		}
	}
}
