package policynft_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPolicyForgedSource is issue 48's reproduction on the data path: x/victim
// is behind a deny-all-ingress NetworkPolicy; x/attacker, on a port with
// the source address check (what the bridge role's ADD sets up), sends
// from the bridge's address and a foreign one, and announces the gateway's
// addresses as its own (gratuitous ARP, unsolicited neighbour
// advertisement). Nothing of it reaches the victim, whose neighbour entries
// for its gateway keep the bridge's MAC. y/open's port is not checked (its
// network opted out): it can send from a foreign address to a pod no
// policy isolates, but a forged node address does not open the victim
// either (the policy's forward chains accept no node address). The node's
// own traffic still reaches the victim.
func TestPolicyForgedSource(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/victim", "x/attacker", "y/open")
	victim, attacker, open := l.pod("x/victim"), l.pod("x/attacker"), l.pod("y/open")
	h := l.node.NFT()
	must(t, h.EnsureSourceCheck(nft.SrcCheckBridge, "veth1", []netip.Addr{attacker.ip, attacker.ip6}))

	vh, err := netops.Open(victim.path)
	must(t, err)
	defer vh.Close()
	vl, err := vh.LinkByName("eth0")
	must(t, err)
	br, err := l.node.LinkByName("br0")
	must(t, err)
	for _, p := range []*labPod{attacker, open} {
		ph, err := netops.Open(p.path)
		must(t, err)
		// What they send to the victim needs no neighbour discovery.
		must(t, ph.EnsureNeigh("eth0", victim.ip, vl.MAC))
		must(t, ph.EnsureNeigh("eth0", victim.ip6, vl.MAC))
		ph.Close()
	}
	for _, gw := range []netip.Addr{nodeAddr, nodeAddr6} {
		must(t, nstest.Reachable(t, victim.path, l.nodePath, gw)) // the victim's entries for its gateway
	}

	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("x", "deny-victim", networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "victim"}}, PolicyTypes: ingress}))
	n.start()

	sinks := map[bool]*nstest.UDPSink{}
	sink := func(p *labPod, v6 bool) *nstest.UDPSink {
		a := p.ip
		if v6 {
			a = p.ip6
		}
		return nstest.ListenUDP(t, p.path, a)
	}
	sinks[false], sinks[true] = sink(victim, false), sink(victim, true)
	to := func(src netip.Addr) *nstest.UDPSink { return sinks[src.Is6()] }
	for _, src := range []netip.Addr{attacker.ip, attacker.ip6, nodeAddr, nodeAddr6, open.ip, netip.MustParseAddr("10.99.0.77")} {
		from := attacker.path
		if src == open.ip {
			from = open.path
		}
		if nstest.SendFrom(t, from, src, to(src), denyWait) {
			t.Errorf("from %s (x/attacker or y/open): reached the victim behind deny-all", src)
		}
	}
	for _, src := range []netip.Addr{nodeAddr, nodeAddr6} {
		if nstest.SendFrom(t, open.path, src, to(src), denyWait) {
			t.Errorf("y/open (not checked) from the node's %s: reached the victim behind deny-all", src)
		}
		if !nstest.SendFrom(t, l.nodePath, src, to(src), allowWait) {
			t.Errorf("the node's own traffic from %s did not reach the victim", src)
		}
	}
	// The ports still carry what is true: the attacker to a pod no policy
	// isolates, and y/open (opted out) from a foreign address.
	if !nstest.SendFrom(t, attacker.path, attacker.ip, sink(open, false), allowWait) {
		t.Error("x/attacker from its own address did not reach y/open")
	}
	if !nstest.SendFrom(t, open.path, netip.MustParseAddr("10.99.0.77"), sink(attacker, false), allowWait) {
		t.Error("y/open, not checked, could not send from a foreign address")
	}

	must(t, nstest.SendGratuitousARP(t, attacker.path, "eth0", nodeAddr))
	must(t, nstest.SendUnsolicitedNA(t, attacker.path, "eth0", attacker.ip6, nodeAddr6))
	deadline := time.Now().Add(denyWait)
	for time.Now().Before(deadline) {
		ns, err := vh.Neighs("eth0")
		must(t, err)
		for _, e := range ns {
			if (e.IP == nodeAddr || e.IP == nodeAddr6) && e.MAC != nil && !bytes.Equal(e.MAC, br.MAC) {
				t.Fatalf("the victim's neighbour entry for its gateway %s now says %s (the bridge is %s)", e.IP, e.MAC, br.MAC)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
