package policynft_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// attach records pods in the policy table's attached set, as their CNI
// ADDs do, and syncs again so that none is left pending.
func (n *node) attach(l *lab, pods ...*labPod) {
	n.t.Helper()
	h, err := nft.Open(l.nodePath)
	must(n.t, err)
	defer h.Close()
	for _, p := range pods {
		_, err := h.MarkPolicyPending(p.ns, []netip.Addr{p.ip, p.ip6})
		must(n.t, err)
	}
	n.start()
}

// invalidCount reads the policy table's c-invalid counter.
func invalidCount(t *testing.T, l *lab) uint64 {
	t.Helper()
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	cs, err := h.PolicyCounters()
	must(t, err)
	c, ok := cs["c-invalid"]
	if !ok {
		t.Fatalf("the policy table has no counter c-invalid: %v", cs)
	}
	return c.Packets
}

// invalidPackets are what conntrack calls INVALID, from src to dst: an
// unsolicited ICMP echo reply carrying data, and TCP segments with no
// flags, FIN alone, SYN with FIN, and FIN, PSH and URG, each to a port dst
// serves (80) and one it does not (9); each has a source port (or ICMP
// id) of its own from base.
func invalidPackets(src, dst netip.Addr, base uint16) []nstest.RawPacket {
	out := []nstest.RawPacket{nstest.ICMPEcho(src, dst, true, base, 1, []byte("a channel the policies cut"))}
	for i, flags := range []byte{0, nstest.TCPFin, nstest.TCPSyn | nstest.TCPFin, nstest.TCPFin | nstest.TCPPsh | nstest.TCPUrg} {
		for j, port := range []uint16{80, 9} {
			out = append(out, nstest.TCPSegment(src, dst, base+uint16(2*i+j), port, flags, nil))
		}
	}
	return out
}

// describe names a packet of invalidPackets.
func describe(p nstest.RawPacket) string {
	if p.Proto != nstest.ProtoTCP {
		return fmt.Sprintf("ICMP type %d %s -> %s", p.Data[0], p.Src, p.Dst)
	}
	return fmt.Sprintf("TCP flags %#02x %s -> %s port %d", p.Data[13], p.Src, p.Dst, uint16(p.Data[2])<<8|uint16(p.Data[3]))
}

// crossing reports, for each packet, whether it reached the namespace at
// to (a raw listener there, after its input hook), sent from the namespace
// at from, all at once, each resent for denyWait.
func crossing(t *testing.T, from, to string, ps []nstest.RawPacket) []bool {
	t.Helper()
	v6 := ps[0].Src.Is6()
	icmp := nstest.ProtoICMP
	if v6 {
		icmp = nstest.ProtoICMPv6
	}
	listen := map[int]*nstest.RawListener{
		nstest.ProtoTCP: nstest.ListenRaw(t, to, nstest.ProtoTCP, v6),
		icmp:            nstest.ListenRaw(t, to, icmp, v6),
	}
	got := make([]bool, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { got[i] = listen[p.Proto].Gets(t, from, p, denyWait) })
	}
	wg.Wait()
	return got
}

// TestPolicyInvalidDropped is issue 60's first finding on the data path:
// NetworkPolicies isolate x/srv for ingress and y/atk for egress, with no
// rule. Packets conntrack calls INVALID (an unsolicited ICMP echo reply
// with data, TCP segments with no flags, FIN alone, SYN+FIN, FIN+PSH+URG,
// to an open and a closed port) cross the node's forward hook in neither
// direction, IPv4 and IPv6, and go on c-invalid: before the fix none of
// the walk's rules matched them (every match loads a conntrack tuple they
// do not have) and the default allowed them, a channel both ways between
// two pods the policies cut apart and a port scan through a deny. The same
// packets from the node itself (its output hook, which no policy judges)
// reach the pods: the packets and the listeners are sound.
func TestPolicyInvalidDropped(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/srv", "y/atk")
	srv, atk := l.pod("x/srv"), l.pod("y/atk")
	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("x", "deny-in", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "srv"), PolicyTypes: ingress}))
	n.e.SetNetworkPolicy(np("y", "deny-out", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "atk"), PolicyTypes: egress}))
	n.start()
	n.attach(l, srv, atk)
	before := invalidCount(t, l)
	base := uint16(41000)
	for _, v6 := range []bool{false, true} {
		for _, d := range []struct{ from, to *labPod }{{atk, srv}, {srv, atk}} {
			src, dst := d.from.ip, d.to.ip
			if v6 {
				src, dst = d.from.ip6, d.to.ip6
			}
			base += 16
			ps := invalidPackets(src, dst, base)
			for i, crossed := range crossing(t, d.from.path, d.to.path, ps) {
				if crossed {
					t.Errorf("%s/%s to %s/%s: %s crossed the node", d.from.ns, d.from.name, d.to.ns, d.to.name, describe(ps[i]))
				}
			}
			node := nodeAddr
			if v6 {
				node = nodeAddr6
			}
			for _, p := range invalidPackets(node, dst, base+8)[:2] { // an echo reply, a TCP segment
				if !nstest.ListenRaw(t, d.to.path, p.Proto, v6).Gets(t, l.nodePath, p, allowWait) {
					t.Errorf("the node's own %s did not reach %s/%s: the test cannot see what it looks for", describe(p), d.to.ns, d.to.name)
				}
			}
		}
	}
	if after := invalidCount(t, l); after <= before {
		t.Errorf("c-invalid counted %d before, %d after", before, after)
	}
}

// TestPolicyInvalidToNode: the same packets from y/atk (egress isolated,
// no rule) to the node's own addresses meet the input hook, and the
// node's stack never sees them: no RST answers a TCP segment with no flags
// to a closed port of the node. The node's own packets to itself are not
// judged.
func TestPolicyInvalidToNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, "y/atk")
	atk := l.pod("y/atk")
	n := newNode(t, l)
	n.e.SetNetworkPolicy(np("y", "deny-out", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "atk"), PolicyTypes: egress}))
	n.start()
	n.attach(l, atk)
	before := invalidCount(t, l)
	for i, pair := range [][2]netip.Addr{{atk.ip, nodeAddr}, {atk.ip6, nodeAddr6}} {
		base := uint16(42000 + 16*i)
		ps := invalidPackets(pair[0], pair[1], base)
		for i, crossed := range crossing(t, atk.path, l.nodePath, ps) {
			if crossed {
				t.Errorf("y/atk to the node: %s reached the node's stack", describe(ps[i]))
			}
		}
		for _, p := range invalidPackets(pair[1], pair[1], base+8)[:2] {
			if !nstest.ListenRaw(t, l.nodePath, p.Proto, p.Src.Is6()).Gets(t, l.nodePath, p, allowWait) {
				t.Errorf("the node's own %s to itself was not delivered: the test cannot see what it looks for", describe(p))
			}
		}
	}
	if after := invalidCount(t, l); after <= before {
		t.Errorf("c-invalid counted %d before, %d after", before, after)
	}
}

// TestPolicyRelated: an ICMP error carries its connection's conntrack
// entry (RELATED), so the table judges it as that connection: x/b admits
// UDP 81 from x/a, and x/b's port unreachable for a's datagram to 81
// (nothing listens there) reaches a, as does one x/b makes itself about
// that connection; once x/b admits UDP 80 only, the same error about the
// same connection is dropped (its master is denied now), although nothing
// isolates a's ingress or b's egress. An error about no connection
// conntrack knows is INVALID: dropped, on c-invalid. IPv4 and IPv6.
func TestPolicyRelated(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b")
	a, b := l.pod("x/a"), l.pod("x/b")
	n := newNode(t, l)
	admit := func(p int) *networkingv1.NetworkPolicy {
		return np("x", "b-in", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), PolicyTypes: ingress,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "a")}},
				Ports: []networkingv1.NetworkPolicyPort{port(udp, p)}}}})
	}
	n.e.SetNetworkPolicy(admit(81))
	n.start()
	n.attach(l, a, b)
	for _, v6 := range []bool{false, true} {
		src, dst, icmp := a.ip, b.ip, nstest.ProtoICMP
		if v6 {
			src, dst, icmp = a.ip6, b.ip6, nstest.ProtoICMPv6
		}
		n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(admit(81)) })
		// a's datagrams to b:81, from one port, until b's kernel refuses
		// them: the entry of the connection (a:sport -> b:81) stays while
		// a sends.
		c := dialUDP(t, a, netip.AddrPortFrom(dst, 81))
		if !refused(c, allowWait) {
			t.Errorf("%s -> %s UDP 81 (allowed, closed): no port unreachable came back", src, dst)
		}
		sport := netip.MustParseAddrPort(c.LocalAddr().String()).Port()
		about := udpHeader(src, dst, sport, 81)
		errs := nstest.ListenRaw(t, a.path, icmp, v6)
		if !errs.Gets(t, b.path, nstest.ICMPUnreachable(dst, src, about), allowWait) {
			t.Errorf("%s: b's port unreachable about a's allowed connection did not reach a", dst)
		}
		n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(admit(80)) })
		c.Write([]byte("x")) // the entry is kept alive (the datagram is dropped)
		if errs.Gets(t, b.path, nstest.ICMPUnreachable(dst, src, about), denyWait) {
			t.Errorf("%s: b's port unreachable about a connection the policy denies now reached a", dst)
		}
		c.Close()
		before := invalidCount(t, l)
		if errs.Gets(t, b.path, nstest.ICMPUnreachable(dst, src, udpHeader(src, dst, sport+1, 82)), denyWait) {
			t.Errorf("%s: a port unreachable about no connection reached a", dst)
		}
		if after := invalidCount(t, l); after <= before {
			t.Errorf("%s: an error about no connection: c-invalid counted %d before, %d after", dst, before, after)
		}
	}
}

// udpHeader is a UDP datagram's header from src:sport to dst:dport, as an
// ICMP error quotes it.
func udpHeader(src, dst netip.Addr, sport, dport uint16) nstest.RawPacket {
	return nstest.RawPacket{Src: src, Dst: dst, Proto: nstest.ProtoUDP,
		Data: []byte{byte(sport >> 8), byte(sport), byte(dport >> 8), byte(dport), 0, 9, 0, 0}}
}

// dialUDP is a UDP socket of p's connected to to, closed at the test's
// end.
func dialUDP(t *testing.T, p *labPod, to netip.AddrPort) net.Conn {
	t.Helper()
	var c net.Conn
	must(t, nstest.Run(t, p.path, func() (err error) { c, err = net.Dial("udp", to.String()); return err }))
	t.Cleanup(func() { c.Close() })
	return c
}

// refused sends a datagram on c every 100 ms until a read says the peer
// refused it (an ICMP port unreachable came back) or wait has passed.
func refused(c net.Conn, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		c.Write([]byte("x"))
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 8)); errors.Is(err, syscall.ECONNREFUSED) {
			return true
		}
	}
	return false
}
