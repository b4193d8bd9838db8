package nft_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// listenTCP accepts connections at ap in the namespace at ns until the
// test ends.
func listenTCP(t *testing.T, ns string, ap netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	must(t, nstest.Run(t, ns, func() (err error) { ln, err = net.Listen("tcp", ap.String()); return err }))
	t.Cleanup(func() { ln.Close() })
	go nstest.Greet(ln)
}

// echoUDP answers every datagram at ap in the namespace at ns until the
// test ends.
func echoUDP(t *testing.T, ns string, ap netip.AddrPort) {
	t.Helper()
	var c net.PacketConn
	must(t, nstest.Run(t, ns, func() (err error) { c, err = net.ListenPacket("udp", ap.String()); return err }))
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from)
		}
	}()
}

// udpAnswered sends a datagram from the namespace at from to ap and
// reports whether an answer came within half a second.
func udpAnswered(t *testing.T, from string, ap netip.AddrPort) bool {
	t.Helper()
	var ok bool
	must(t, nstest.Run(t, from, func() error {
		c, err := net.Dial("udp", ap.String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Write([]byte("x")); err != nil {
			return nil // an egress drop in the sender: EPERM
		}
		_, err = c.Read(make([]byte, 8))
		ok = err == nil
		return nil
	}))
	return ok
}

// TestPodPolicyTraffic puts a MultiNetworkPolicy table in a pod namespace
// whose net1 is a veth to a peer's net1 and checks real TCP and UDP, IPv4
// and IPv6: an ingress policy that lets the peer reach TCP 5555 and UDP
// 6666 only; the pod's own connections out, and their replies, open while
// it is not isolated in egress; egress isolated with a rule to TCP 5555
// only; the table removed; eth0-like traffic on another interface never
// judged.
func TestPodPolicyTraffic(t *testing.T) {
	t.Parallel()
	peer, pod := openNS(t, "lo"), openNS(t, "lo")
	_, _, err := peer.EnsureVeth(netops.VethOpts{HostName: "net1", PeerName: "net1", Peer: pod})
	must(t, err)
	_, _, err = peer.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0", Peer: pod})
	must(t, err)
	type fam struct {
		name                string
		peerA, podA, plainA netip.Addr // plainA: the pod's eth0
		peerPlain           netip.Addr
		bits                int
	}
	fams := []fam{
		{"v4", netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("198.51.100.1"), 24},
		{"v6", netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8:1::2"), netip.MustParseAddr("2001:db8:1::1"), 64},
	}
	for _, f := range fams {
		opts := netops.AddrOpts{NoDAD: f.peerA.Is6()}
		must(t, peer.EnsureAddr("net1", netip.PrefixFrom(f.peerA, f.bits), opts))
		must(t, pod.EnsureAddr("net1", netip.PrefixFrom(f.podA, f.bits), opts))
		must(t, peer.EnsureAddr("eth0", netip.PrefixFrom(f.peerPlain, f.bits), opts))
		must(t, pod.EnsureAddr("eth0", netip.PrefixFrom(f.plainA, f.bits), opts))
		for _, p := range []uint16{5555, 5556} {
			listenTCP(t, pod.Path(), netip.AddrPortFrom(f.podA, p))
			listenTCP(t, pod.Path(), netip.AddrPortFrom(f.plainA, p))
			listenTCP(t, peer.Path(), netip.AddrPortFrom(f.peerA, p))
			echoUDP(t, pod.Path(), netip.AddrPortFrom(f.podA, p+1111))
			echoUDP(t, peer.Path(), netip.AddrPortFrom(f.peerA, p+1111))
		}
	}
	peerSet := policymodel.NewSet("speer", policymodel.Addrs, "the peer",
		policymodel.AddrElem(fams[0].peerA), policymodel.AddrElem(fams[1].peerA))
	allowIn := &policymodel.Policy{ID: "mnp/t/in", Tier: policymodel.TierNetworkPolicy, Subject: "sself", Rules: []policymodel.Rule{{
		ID: "mnp/t/in/ingress/0", Action: policymodel.Allow, Clauses: []policymodel.Clause{{
			Peer: "speer", Ports: []policymodel.PortRange{{Proto: policymodel.TCP, First: 5555, Last: 5555}, {Proto: policymodel.UDP, First: 6666, Last: 6666}},
		}},
	}}}
	allowOut := &policymodel.Policy{ID: "mnp/t/out", Tier: policymodel.TierNetworkPolicy, Subject: "sself", Rules: []policymodel.Rule{{
		ID: "mnp/t/out/egress/0", Action: policymodel.Allow, Clauses: []policymodel.Clause{{
			Ports: []policymodel.PortRange{{Proto: policymodel.TCP, First: 5555, Last: 5555}},
		}},
	}}}
	h := pod.NFT()
	check := func(t *testing.T, what string, want map[string]bool) {
		t.Helper()
		for _, f := range fams {
			got := map[string]bool{
				"in tcp 5555":   dial(t, peer.Path(), netip.AddrPortFrom(f.podA, 5555)) == nil,
				"in tcp 5556":   dial(t, peer.Path(), netip.AddrPortFrom(f.podA, 5556)) == nil,
				"in udp 6666":   udpAnswered(t, peer.Path(), netip.AddrPortFrom(f.podA, 6666)),
				"in udp 6667":   udpAnswered(t, peer.Path(), netip.AddrPortFrom(f.podA, 6667)),
				"out tcp 5555":  dial(t, pod.Path(), netip.AddrPortFrom(f.peerA, 5555)) == nil,
				"out tcp 5556":  dial(t, pod.Path(), netip.AddrPortFrom(f.peerA, 5556)) == nil,
				"out udp 6666":  udpAnswered(t, pod.Path(), netip.AddrPortFrom(f.peerA, 6666)),
				"eth0 tcp 5556": dial(t, peer.Path(), netip.AddrPortFrom(f.plainA, 5556)) == nil,
			}
			for k, w := range want {
				if got[k] != w {
					t.Errorf("%s, %s %s: open = %v, want %v", what, f.name, k, got[k], w)
				}
			}
		}
	}
	all := func(v bool) map[string]bool {
		return map[string]bool{"in tcp 5555": v, "in tcp 5556": v, "in udp 6666": v, "in udp 6667": v, "out tcp 5555": v, "out tcp 5556": v, "out udp 6666": v, "eth0 tcp 5556": true}
	}
	// The links are new: wait until each family carries (neighbour
	// discovery) before judging anything.
	for _, f := range fams {
		for _, ap := range []netip.AddrPort{netip.AddrPortFrom(f.podA, 5555), netip.AddrPortFrom(f.plainA, 5555)} {
			deadline := time.Now().Add(20 * time.Second)
			for dial(t, peer.Path(), ap) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("%s not reachable from the peer without a table", ap)
				}
			}
		}
	}
	check(t, "no table", all(true))

	ingressOnly := &nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1", Ingress: nft.PodDir{Isolated: true, Policies: []*policymodel.Policy{allowIn}}, Sets: []*policymodel.Set{peerSet}}}}
	must(t, h.ApplyPodPolicy(ingressOnly))
	want := all(true)
	want["in tcp 5556"], want["in udp 6667"] = false, false
	check(t, "ingress isolated, TCP 5555 and UDP 6666 from the peer allowed", want)

	both := &nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1",
		Ingress: nft.PodDir{Isolated: true, Policies: []*policymodel.Policy{allowIn}},
		Egress:  nft.PodDir{Isolated: true, Policies: []*policymodel.Policy{allowOut}},
		Sets:    []*policymodel.Set{peerSet}}}}
	must(t, h.ApplyPodPolicy(both))
	want["out tcp 5556"], want["out udp 6666"] = false, false
	check(t, "egress isolated too, TCP 5555 out allowed", want)

	// Applied again (the table replaced in one transaction), then an
	// ingress policy that no longer names the peer.
	must(t, h.ApplyPodPolicy(both))
	check(t, "the same again", want)
	none := &nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1", Ingress: nft.PodDir{Isolated: true}}}}
	must(t, h.ApplyPodPolicy(none))
	want = all(true)
	for _, k := range []string{"in tcp 5555", "in tcp 5556", "in udp 6666", "in udp 6667"} {
		want[k] = false
	}
	check(t, "ingress isolated, nothing allowed", want)

	must(t, h.ApplyPodPolicy(&nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1"}}}))
	if ok, err := h.HasPodPolicy(); err != nil || ok {
		t.Fatalf("table left with nothing isolated: %v, %v", ok, err)
	}
	check(t, "no interface isolated: no table", all(true))
	must(t, h.DeletePodPolicy()) // nothing to delete
}

// TestPodPolicyRefused: what the kernel would refuse is refused before it,
// with the field named, and the table is left as it was.
func TestPodPolicyRefused(t *testing.T) {
	t.Parallel()
	labtest.OnNFT(t, "lo", testPodPolicyRefused)
}

func testPodPolicyRefused(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	iso := nft.PodDir{Isolated: true}
	must(t, h.ApplyPodPolicy(&nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1", Ingress: iso}}}))
	for _, p := range []*nft.PodPolicy{
		{Ifaces: []nft.PodIface{{Name: "", Ingress: iso}}},
		{Ifaces: []nft.PodIface{{Name: "a-very-long-ifname", Ingress: iso}}},
		{Ifaces: []nft.PodIface{{Name: "net1", Ingress: iso}, {Name: "net1", Egress: iso}}},
	} {
		if err := h.ApplyPodPolicy(p); err == nil {
			t.Errorf("%+v: applied", p.Ifaces)
		}
	}
	if ok, err := h.HasPodPolicy(); err != nil || !ok {
		t.Errorf("the table after refusals: %v, %v; want it kept", ok, err)
	}
}
