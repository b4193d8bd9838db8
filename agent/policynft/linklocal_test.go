package policynft_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestPolicyLinkLocal (issue 60): IPv6 link-local addresses are in no
// policy set, and before the fix TCP between them went around every
// policy: x/atk, isolated for egress, reached x/srv, isolated for
// ingress, on srv's link-local address, and the node's services on the
// bridge's. Now the policy table drops link-local traffic on the forward
// hook (counted on c-linklocal) while the pods' neighbour discovery
// passes, and the source address check of atk's port (as the bridge role
// makes it) keeps its link-local traffic from the node too. Before the
// policies both connections work: the probes can tell.
func TestPolicyLinkLocal(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/atk", "x/srv")
	atk, srv := l.pod("x/atk"), l.pod("x/srv")
	node := &labPod{ns: "node", name: "node", path: l.nodePath, ip: nodeAddr}
	serve(t, node, false)
	srvLL := netops.PodLinkLocal("veth1").WithZone("eth0")
	brAddrs, err := l.node.AllAddrs("br0")
	must(t, err)
	var brLL netip.Addr
	for _, p := range brAddrs {
		if p.Addr().IsLinkLocalUnicast() {
			brLL = p.Addr().WithZone("eth0")
		}
	}
	if !brLL.IsValid() {
		t.Fatalf("br0 has no link-local address: %v", brAddrs)
	}
	for _, to := range []netip.Addr{srvLL, brLL} {
		if !connect(t, atk, to, policymodel.TCP, 80, allowWait) {
			t.Fatalf("without policies x/atk does not reach %s:80", to)
		}
	}

	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("x", "atk-out", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "atk"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}))
	n.e.SetNetworkPolicy(np("x", "srv-in", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "srv"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}))
	n.start()
	if connect(t, atk, srv.ip6, policymodel.TCP, 80, denyWait) {
		t.Fatal("x/atk reaches x/srv's API address: the policies are not in force")
	}
	if connect(t, atk, srvLL, policymodel.TCP, 80, denyWait) {
		t.Errorf("x/atk (egress isolated) reaches x/srv (ingress isolated) on its link-local address %s", srvLL)
	}
	counters, err := l.node.NFT().PolicyCounters()
	must(t, err)
	if c := counters["c-linklocal"]; c.Packets == 0 {
		t.Errorf("c-linklocal counted no packet (counters %v)", counters)
	}
	// Neighbour discovery crossed the forward hook: atk resolved srv's
	// link-local address.
	ah, err := netops.Open(atk.path)
	must(t, err)
	defer ah.Close()
	resolved := false
	for deadline := time.Now().Add(allowWait); !resolved && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ns, err := ah.Neighs("eth0")
		must(t, err)
		resolved = slices.ContainsFunc(ns, func(e netops.Neigh) bool { return e.IP == srvLL.WithZone("") && e.MAC != nil })
	}
	if !resolved {
		t.Errorf("x/atk did not resolve x/srv's link-local address %s: neighbour discovery did not cross", srvLL)
	}

	// The node's own link-local services are the source check's to keep
	// (the input hook carries the node's own link-local traffic too).
	must(t, l.node.NFT().EnsureSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{atk.ip, atk.ip6}))
	if connect(t, atk, brLL, policymodel.TCP, 80, denyWait) {
		t.Errorf("x/atk reaches the node's services on the bridge's link-local address %s", brLL)
	}
	if connect(t, atk, srvLL, policymodel.TCP, 80, denyWait) {
		t.Errorf("x/atk, checked, reaches x/srv on its link-local address %s", srvLL)
	}
}
