package policynft_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// udpWho answers each datagram to ap in the namespace with ap's address:
// which endpoint answered.
func udpWho(t *testing.T, nsPath string, ap netip.AddrPort) {
	var pc net.PacketConn
	must(t, nstest.Run(t, nsPath, func() (err error) { pc, err = net.ListenPacket("udp", ap.String()); return err }))
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(ap.Addr().String()), from)
		}
	}()
}

// TestServicesFastPath: the fast path (a flowtable at the devices'
// ingress, before prerouting) with the Services table. A routed pod's
// TCP connection to a ClusterIP is offloaded with its DNAT (the flow
// carries the NAT: its data still reaches the backend), and a policy
// change still decides it at its next packet (the policy's reset of the
// fast path): denied, cut; allowed again, TCP's resend passes. A UDP
// client that keeps its socket (a resolver) has its offloaded flow to an
// endpoint that leaves the Service taken down with the conntrack entry
// the services table has deleted (ClearConntrack): its next datagrams
// reach the other endpoint, not the one gone, whose stale flow the
// flowtable would otherwise keep DNATing to.
func TestServicesFastPath(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b")
	yr := addRoutedPod(t, l, "y/r")
	_, err := l.node.NFT().EnsureFastPath(nft.FastPathSpec{Devices: []string{"br0", "vr0"}})
	nstest.SkipIfKernelLacks(t, "nftables flowtables", err)
	must(t, err)
	nstest.WaitLinksUp(t, l.nodePath)
	xa, xb := l.pod("x/a"), l.pod("x/b")
	n := newNode(t, l)
	fromY := func(p int) *networkingv1.NetworkPolicy {
		return np("x", "from-y", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}},
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, p), port(udp, 82)},
			}}})
	}
	n.e.SetNetworkPolicy(fromY(82))
	n.start()

	cip := netip.MustParseAddr("10.96.0.30")
	dnsA, dnsB := netip.AddrPortFrom(xa.ip, 82), netip.AddrPortFrom(xb.ip, 82)
	udpWho(t, xa.path, dnsA)
	udpWho(t, xb.path, dnsB)
	ep := func(ap netip.AddrPort) svcmodel.Endpoint {
		return svcmodel.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true}
	}
	snap := func(udpEPs ...netip.AddrPort) *svcmodel.Snapshot {
		s := &svcmodel.Snapshot{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("10.98.0.0/24")},
			Ports: []svcmodel.ServicePort{{Name: svcmodel.PortName{Namespace: "x", Name: "echo"}, Family: svcmodel.IPv4, Protocol: svcmodel.TCP,
				Frontends:        []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: cip, Family: svcmodel.IPv4, Port: 82}},
				ClusterEndpoints: []svcmodel.Endpoint{ep(netip.AddrPortFrom(xa.ip, 82))}, HasEndpoints: true}}}
		u := svcmodel.ServicePort{Name: svcmodel.PortName{Namespace: "x", Name: "dns"}, Family: svcmodel.IPv4, Protocol: svcmodel.UDP,
			Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: cip, Family: svcmodel.IPv4, Port: 82}}, HasEndpoints: len(udpEPs) > 0}
		for _, e := range udpEPs {
			u.ClusterEndpoints = append(u.ClusterEndpoints, ep(e))
		}
		s.Ports = append(s.Ports, u)
		return s
	}
	h, err := nft.Open(l.nodePath)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	var cleared []netip.AddrPort
	svc := nft.NewServices(h, nft.ServicesOptions{ClearConntrack: func(gone []netip.AddrPort) error {
		cleared = append(cleared, gone...)
		_, err := l.node.DeleteConntrackTo(gone)
		return err
	}})
	must(t, svc.Apply(snap(dnsA, dnsB)))
	t.Cleanup(func() { svc.Delete() })
	seen := newForwardSeen(t, l)

	t.Run("TCP", func(t *testing.T) {
		n.t = t
		nstest.ServeEcho(t, xa.path, netip.AddrPortFrom(xa.ip, 82), false)
		c := &echoConn{t: t}
		must(t, nstest.Run(t, yr.path, func() (err error) {
			c.c, err = net.DialTimeout("tcp", netip.AddrPortFrom(cip, 82).String(), 5*time.Second)
			return err
		}))
		t.Cleanup(func() { c.c.Close() })
		offloaded := func(what string) {
			t.Helper()
			for i := range 2 * nft.DefaultFastPathAfter {
				if !c.echo(fmt.Sprint(i), allowWait) {
					t.Fatalf("%s: echo %d through the ClusterIP: the allowed connection does not carry data", what, i)
				}
			}
			before := seen.packets()
			for i := range 20 {
				if !c.echo(fmt.Sprint(i), allowWait) {
					t.Fatalf("%s: echo %d: the offloaded connection does not reach the backend (its DNAT lost)", what, i)
				}
			}
			if got := seen.packets() - before; got != 0 {
				t.Fatalf("%s: the forward hook saw %d packets of 40 past the fast path's threshold: not offloaded", what, got)
			}
		}
		offloaded("allowed")
		n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(fromY(83)) })
		if c.echo("two", denyWait) {
			t.Error("the offloaded connection to the ClusterIP still carries data after its policy no longer allows the backend's port")
		}
		n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(fromY(82)) })
		if !c.resent("two") {
			t.Fatal("after the port is allowed again, the resent data is not echoed")
		}
		offloaded("allowed again")
	})

	t.Run("UDP endpoint leaves", func(t *testing.T) {
		var u *net.UDPConn
		must(t, nstest.Run(t, yr.path, func() (err error) {
			u, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(cip, 82)))
			return err
		}))
		t.Cleanup(func() { u.Close() })
		ask := func(wait time.Duration) string {
			t.Helper()
			must(t, u.SetDeadline(time.Now().Add(wait)))
			if _, err := u.Write([]byte("?")); err != nil {
				return ""
			}
			b := make([]byte, 64)
			k, err := u.Read(b)
			if err != nil {
				return ""
			}
			return string(b[:k])
		}
		first := ask(allowWait)
		if first == "" {
			t.Fatal("no answer through the UDP ClusterIP")
		}
		for i := range nft.DefaultFastPathAfter {
			if got := ask(allowWait); got != first {
				t.Fatalf("ask %d: answered by %q, then %q", i, first, got)
			}
		}
		before := seen.packets()
		for range 10 {
			ask(allowWait)
		}
		if got := seen.packets() - before; got != 0 {
			t.Fatalf("the forward hook saw %d packets of 20 of the UDP flow past the threshold: not offloaded, the test would show nothing", got)
		}
		other := dnsA
		if first == dnsA.Addr().String() {
			other = dnsB
		}
		cleared = nil
		must(t, svc.Apply(snap(other)))
		if !slices.Contains(cleared, netip.MustParseAddrPort(first+":82")) {
			t.Fatalf("ClearConntrack got %v, want the endpoint that left, %s", cleared, first)
		}
		// The kernel's flowtable takes the flow down when it sees its
		// conntrack entry gone (its garbage collection runs each
		// second): the client's resends reach the endpoint left.
		deadline := time.Now().Add(allowWait)
		for {
			got := ask(denyWait)
			if got == other.Addr().String() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s left, the client's datagrams still reach %q, want %s: the offloaded flow kept its stale DNAT", first, got, other.Addr())
			}
		}
	})
}
