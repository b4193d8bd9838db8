//go:build !nokube

package policynft_test

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/fqdn"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPolicyDNS: the agent's side of domainNames over a real table. The
// pods a domainNames policy selects (x's) are in the DNS table's sets, the
// others not; the trusted resolvers are in the table's resolvers sets;
// Permit answers from their egress rules (DNS to y/a refused until a rule
// allows UDP 53 to it) for trusted resolvers only (a server the rules
// allow but the operator does not trust is refused); Learn puts what a pod resolved for a
// matching name into the peer's set, IPv4 and IPv6 each with the pod's
// address of its family (the AAAA asked over IPv4), so its first
// connection passes; a name no peer names, or another pod's lookup, opens
// nothing for x/a; past its cap a pod learns nothing more.
func TestPolicyDNS(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "y/a")
	xa, ya := l.pod("x/a"), l.pod("y/a")
	n := newNode(t, l)
	dns, err := policynft.NewDNS(l.nodePath)
	must(t, err)
	defer dns.Close()
	n.sink.WithDNS(dns)
	rules := func(extra ...cnpv1.ClusterNetworkPolicyEgressRule) *cnpv1.ClusterNetworkPolicy {
		c := &cnpv1.ClusterNetworkPolicy{Spec: cnpv1.ClusterNetworkPolicySpec{
			Tier: cnpv1.AdminTier, Priority: 1,
			Subject: cnpv1.ClusterNetworkPolicySubject{Namespaces: sel("ns", "x")},
			Egress: append(extra,
				cnpv1.ClusterNetworkPolicyEgressRule{Action: cnpv1.ClusterNetworkPolicyRuleActionAccept,
					To: []cnpv1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1.DomainName{"*.example.com"}}}, Protocols: []cnpv1.ClusterNetworkPolicyProtocol{tcpPort(80)}},
				cnpv1.ClusterNetworkPolicyEgressRule{Action: cnpv1.ClusterNetworkPolicyRuleActionDeny,
					To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{"0.0.0.0/0", "::/0"}}}}),
		}}
		c.Name = "dns"
		return c
	}
	n.e.SetClusterNetworkPolicy(rules())
	n.e.SetResolvers([]netip.Addr{ya.ip, ya.ip6})
	untrusted := netip.MustParseAddr("10.99.0.53")
	n.start()
	// The watcher's lock, as the agent has it: the engine changes under
	// it; Run and the DNS side read the models handed over.
	var mu sync.Mutex
	change := func(c func(*policy.Engine) policymodel.Delta) { mu.Lock(); defer mu.Unlock(); n.do(c) }
	go n.sink.Run(t.Context(), nil)

	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	pods, err := h.DNSPods()
	must(t, err)
	slices.SortFunc(pods, netip.Addr.Compare)
	if want := []netip.Addr{xa.ip, xa.ip6}; !slices.Equal(pods, want) {
		t.Errorf("the DNS table's pods %v, want x/a's %v", pods, want)
	}
	if res, err := h.DNSResolvers(); err != nil || !slices.Equal(res, []netip.Addr{ya.ip, ya.ip6}) {
		t.Errorf("the DNS table's resolvers %v (%v), want y/a's %v", res, err, []netip.Addr{ya.ip, ya.ip6})
	}
	// Run hands the DNS side the model on its goroutine: until then
	// Permit refuses everything, so wait for an allowed server first.
	udp53 := func(to netip.Addr) bool { return dns.Permit(xa.ip, netip.AddrPortFrom(to, 53), policymodel.UDP) }
	allowDNS := cnpv1.ClusterNetworkPolicyEgressRule{Action: cnpv1.ClusterNetworkPolicyRuleActionAccept,
		To:        []cnpv1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1.CIDR{cnpv1.CIDR(ya.ip.String() + "/32"), cnpv1.CIDR(untrusted.String() + "/32")}}},
		Protocols: []cnpv1.ClusterNetworkPolicyProtocol{{UDP: &cnpv1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnpv1.Port{Number: 53}}}}}
	change(func(e *policy.Engine) policymodel.Delta { return e.SetClusterNetworkPolicy(rules(allowDNS)) })
	deadline := time.Now().Add(30 * time.Second)
	for !udp53(ya.ip) {
		if time.Now().After(deadline) {
			t.Fatal("Permit: x/a may not send DNS to y/a, which a rule allows")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if udp53(untrusted) {
		t.Errorf("Permit: x/a may send DNS through the proxy to %s, which a rule allows but no one trusts", untrusted)
	}
	change(func(e *policy.Engine) policymodel.Delta { return e.SetClusterNetworkPolicy(rules()) })
	if udp53(ya.ip) {
		t.Error("Permit: x/a may send DNS to y/a, which its policy now denies")
	}
	if dns.Permit(ya.ip, netip.AddrPortFrom(xa.ip, 53), policymodel.UDP) {
		t.Error("Permit: y/a, not in the DNS sets, answered")
	}

	learned := []fqdn.LearnedAddr{{Addr: ya.ip, TTL: time.Minute}, {Addr: ya.ip6, TTL: time.Minute}}
	must(t, dns.Learn(xa.ip, []string{"db.other.org"}, learned)) // no peer names it
	must(t, dns.Learn(ya.ip, []string{"web.example.com"}, learned))
	if connect(t, xa, ya.ip, policymodel.TCP, 80, denyWait) {
		t.Fatal("x/a reaches y/a after lookups that are not its own for a name of the peer")
	}
	must(t, dns.Learn(xa.ip, []string{"www.example.com", "web.example.com"}, learned)) // a CNAME chain, asked over IPv4
	for _, dst := range []netip.Addr{ya.ip, ya.ip6} {
		if !connect(t, xa, dst, policymodel.TCP, 80, allowWait) {
			t.Errorf("x/a's first connection to %s, which it resolved, is denied", dst)
		}
	}
	dns.MaxPairs = 2
	if err := dns.Learn(xa.ip, []string{"more.example.com"}, []fqdn.LearnedAddr{{Addr: netip.MustParseAddr("10.99.0.77"), TTL: time.Minute}}); err == nil {
		t.Error("a pod past its cap learned another address")
	}
}
