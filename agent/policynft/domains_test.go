package policynft_test

import (
	"testing"
	"time"

	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPolicyDomainPairs: a ClusterNetworkPolicy of namespace x that
// accepts web.example.com on TCP 80 and denies the rest of the world.
// x/a reaches y/a (the address "web.example.com" will resolve to) only
// once its pair is learned (LearnPolicyPairs, as the DNS proxy does before
// it hands the pod the answer): at once, IPv4 and IPv6, on TCP 80 alone;
// a full sync of the table keeps what was learned; when the pair's TTL is
// over, a new connection is denied again.
func TestPolicyDomainPairs(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "y/a")
	xa, ya := l.pod("x/a"), l.pod("y/a")
	n := newNode(t, l)
	c := &cnpv1.ClusterNetworkPolicy{Spec: cnpv1.ClusterNetworkPolicySpec{
		Tier: cnpv1.AdminTier, Priority: 1,
		Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: sel("ns", "x")},
		Egress: []cnpv1.ClusterNetworkPolicyEgressRule{
			{Action: cnpv1.ClusterNetworkPolicyRuleActionAccept, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1.DomainName{"web.example.com"}}}, Protocols: []cnpv1.ClusterNetworkPolicyProtocol{tcpPort(80)}},
			{Action: cnpv1.ClusterNetworkPolicyRuleActionDeny, To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0", "::/0"}}}},
		},
	}}
	c.Name = "dns"
	n.e.SetClusterNetworkPolicy(c)
	n.start()
	m := n.e.Model()
	if len(m.Domains) != 1 {
		t.Fatalf("Domains %+v: want the one peer", m.Domains)
	}
	set := m.Domains[0].Set
	if connect(t, xa, ya.ip, policymodel.TCP, 80, denyWait) || connect(t, xa, ya.ip6, policymodel.TCP, 80, denyWait) {
		t.Fatal("x/a reaches y/a before resolving it")
	}
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	const ttl = 3 * time.Second
	must(t, h.LearnPolicyPairs(set, []nft.PolicyPair{{Pod: xa.ip, Dst: ya.ip, TTL: ttl}, {Pod: xa.ip6, Dst: ya.ip6, TTL: ttl}}))
	learned := time.Now()
	for _, dst := range []struct {
		name string
		ok   bool
	}{{"IPv4", connect(t, xa, ya.ip, policymodel.TCP, 80, allowWait)}, {"IPv6", connect(t, xa, ya.ip6, policymodel.TCP, 80, allowWait)}} {
		if !dst.ok {
			t.Errorf("%s: x/a's first connection to the address it resolved is denied", dst.name)
		}
	}
	if connect(t, xa, ya.ip, policymodel.TCP, 81, denyWait) {
		t.Error("x/a reaches y/a on TCP 81, which the rule does not name")
	}
	// A full sync rewrites the table: what was learned stays.
	n.do(func(e *policy.Engine) policymodel.Delta {
		return e.SetClusterNetworkPolicy(c) // no change; the resync below is the full one
	})
	must(t, n.sink.Apply(n.e.Model(), policymodel.Delta{Rules: true, AddSets: []policymodel.SetID{set}}))
	if !connect(t, xa, ya.ip, policymodel.TCP, 80, allowWait) {
		t.Error("after a full sync of the sets, the learned pair is gone")
	}
	// Past its TTL the pair expires: new connections are denied again.
	deadline := learned.Add(ttl + 20*time.Second)
	for connect(t, xa, ya.ip, policymodel.TCP, 80, denyWait) {
		if time.Now().After(deadline) {
			t.Fatalf("x/a still reaches y/a %s after its pair's TTL of %s", time.Since(learned).Round(time.Second), ttl)
		}
	}
	if time.Since(learned) < ttl-time.Second {
		t.Errorf("the pair expired after %s, before its TTL of %s", time.Since(learned), ttl)
	}
}
