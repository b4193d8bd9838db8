package nft_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestDNSRedirect: pods in the DNS table's sets reach a transparent
// listener on the node (the proxy's stand-in) when they send DNS, over UDP
// and TCP, IPv4 and IPv6, to a trusted resolver; the listener sees the
// server they asked for, or for a "ClusterIP" the endpoint a
// kube-proxy-like DNAT picked, and the pod has its answer from the
// ClusterIP; pods not in the sets, servers not in the resolvers sets,
// other ports, the listener's port asked directly and removed pods are not
// redirected; Ensure and Delete are idempotent. With br_netfilter on (the
// agent turns it on) and off.
func TestDNSRedirect(t *testing.T) {
	t.Parallel()
	for _, brnf := range []bool{true, false} {
		t.Run(fmt.Sprintf("br_netfilter %v", brnf), func(t *testing.T) { testDNSRedirect(t, brnf) })
	}
}

func testDNSRedirect(t *testing.T, brnf bool) {
	nftBin := nstest.RequireProgram(t, "nft", "nftables")
	l := labtest.New(t, 2)
	if brnf {
		must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"},
			netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-ip6tables", Value: "1"}))
	}
	h := l.Host.NFT()
	const port = 1053
	server4 := netip.MustParseAddrPort("192.0.2.53:53") // nowhere: only the proxy answers
	server6 := netip.MustParseAddrPort("[2001:db8::53]:53")
	// not trusted: a pod's own DNS server (nowhere too: were it diverted,
	// the stand-in would answer)
	other4, other6 := netip.MustParseAddrPort("192.0.2.54:53"), netip.MustParseAddrPort("[2001:db8::54]:53")
	cluster4 := netip.MustParseAddrPort("10.96.0.10:53") // DNATed to server4/6
	cluster6 := netip.MustParseAddrPort("[fd00:96::a]:53")
	must(t, l.Host.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("192.0.2.0/24"), Dev: "br0"}))
	must(t, l.Host.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("2001:db8::/64"), Dev: "br0"}))
	kp := "table inet kp { chain prerouting { type nat hook prerouting priority -100; " +
		fmt.Sprintf("ip daddr %s meta l4proto { tcp, udp } th dport 53 dnat ip to %s; ", cluster4.Addr(), server4) +
		fmt.Sprintf("ip6 daddr %s meta l4proto { tcp, udp } th dport 53 dnat ip6 to %s; }; }", cluster6.Addr(), server6)
	nftRun(t, nftBin, l.Host.Path(), kp)
	must(t, l.Host.EnsureMarkLocal(netops.DNSMarkLocal))

	// The stand-in proxy: it answers each datagram and connection with
	// the destination it was sent to (its server), from that destination.
	var mu sync.Mutex
	var seen []netip.AddrPort // the pods' addresses and ports it had queries from
	saw := func(from netip.AddrPort) {
		mu.Lock()
		seen = append(seen, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
		mu.Unlock()
	}
	for _, fam := range []string{"4", "6"} {
		must(t, nstest.Run(t, l.Host.Path(), func() error {
			pc, err := transparent.ListenPacket(context.Background(), "udp"+fam, fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			t.Cleanup(func() { pc.Close() })
			go serveUDP(pc.(*net.UDPConn), saw)
			ln, err := transparent.Listen(context.Background(), "tcp"+fam, fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					saw(netip.MustParseAddrPort(c.RemoteAddr().String()))
					c.Write([]byte(c.LocalAddr().String()))
					c.Close()
				}
			}()
			return nil
		}))
	}

	// ask sends "q" from pod to server, and returns the answer and whom
	// it came from.
	ask := func(pod int, network string, server netip.AddrPort) (got string, from netip.AddrPort, err error) {
		err = nstest.Run(t, l.Pods[pod].Path(), func() error {
			b := make([]byte, 128)
			if network == "udp" {
				pc, err := net.ListenUDP("udp", nil) // not connected: any source is read
				if err != nil {
					return err
				}
				defer pc.Close()
				pc.SetDeadline(time.Now().Add(700 * time.Millisecond))
				if _, err := pc.WriteToUDPAddrPort([]byte("q"), server); err != nil {
					return err
				}
				n, f, err := pc.ReadFromUDPAddrPort(b)
				got, from = string(b[:n]), netip.AddrPortFrom(f.Addr().Unmap(), f.Port())
				return err
			}
			c, err := net.DialTimeout(network, server.String(), 700*time.Millisecond)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(700 * time.Millisecond))
			n, err := c.Read(b)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			got, from = string(b[:n]), netip.MustParseAddrPort(c.RemoteAddr().String())
			return nil
		})
		return got, from, err
	}
	// noAnswer asks the queries at once and checks that none is answered.
	type query struct {
		pod     int
		network string
		server  netip.AddrPort
		what    string
	}
	var unanswered []query
	noAnswer := func(qs ...query) {
		t.Helper()
		var wg sync.WaitGroup
		for _, q := range qs {
			wg.Go(func() {
				if got, _, err := ask(q.pod, q.network, q.server); err == nil {
					t.Errorf("%s: pod %d %s to %v answered %q", q.what, q.pod, q.network, q.server, got)
				}
			})
		}
		wg.Wait()
	}
	a4, a6 := labtest.PodAddrs(0)
	b4, b6 := labtest.PodAddrs(1)

	// The table as the DNAT of before left it: its nat chain goes.
	nftRun(t, nftBin, l.Host.Path(), "table inet cnibox-dns { set pods-4 { type ipv4_addr; }; set pods-6 { type ipv6_addr; }; "+
		"chain prerouting { type nat hook prerouting priority -110; ip saddr @pods-4 udp dport 53 dnat ip to 10.99.0.1:1053; }; }")
	must(t, h.EnsureDNSPods([]netip.Addr{a4.Addr(), a6.Addr()}))
	must(t, h.EnsureDNSPods([]netip.Addr{a4.Addr()})) // again: no error
	r := nft.DNSRedirect{Port4: port, Port6: port}
	changed, err := h.EnsureDNSRedirect(r)
	must(t, err)
	if !changed {
		t.Errorf("EnsureDNSRedirect on a new table: changed false")
	}
	if changed, err := h.EnsureDNSRedirect(nft.DNSRedirect{Port4: port, Port6: port, Mark: nft.DNSMark}); err != nil || changed {
		t.Errorf("EnsureDNSRedirect again: changed %v, %v; want false, nil", changed, err)
	}
	rules, err := h.DNSRedirectRules()
	must(t, err)
	if len(rules) != 12 {
		t.Errorf("rules %q, want 12", rules)
	}
	// No resolver trusted yet: nothing is diverted.
	noAnswer(query{0, "udp", server4, "no trusted resolver"}, query{0, "tcp", cluster6, "no trusted resolver"})
	must(t, h.SetDNSResolvers([]netip.Addr{server4.Addr(), server6.Addr()}))
	if got, err := h.DNSResolvers(); err != nil || !slices.Equal(got, []netip.Addr{server4.Addr(), server6.Addr()}) {
		t.Errorf("DNSResolvers = %v, %v", got, err)
	}
	pods, err := h.DNSPods()
	must(t, err)
	if !slices.Equal(pods, []netip.Addr{a4.Addr(), a6.Addr()}) {
		t.Errorf("DNSPods = %v", pods)
	}

	for _, tt := range []struct{ asked, endpoint netip.AddrPort }{
		{server4, server4}, {server6, server6}, {cluster4, server4}, {cluster6, server6},
	} {
		for _, network := range []string{"udp", "tcp"} {
			want := netip.AddrPortFrom(tt.endpoint.Addr(), port).String() // the stand-in's local address
			got, from, err := ask(0, network, tt.asked)
			if err != nil || got != want || from != tt.asked {
				t.Errorf("pod 0 %s to %v: %q from %v, %v; want the proxy's answer %q from %v", network, tt.asked, got, from, err, want, tt.asked)
			}
			unanswered = append(unanswered, query{1, network, tt.asked, "pod 1 (not in the set)"})
		}
	}
	unanswered = append(unanswered, query{0, "tcp", netip.AddrPortFrom(server4.Addr(), 54), "another port"})
	for _, to := range []netip.AddrPort{other4, other6} {
		for _, network := range []string{"udp", "tcp"} {
			unanswered = append(unanswered, query{0, network, to, "a server not trusted"})
		}
	}
	// The proxy's port, asked directly (not diverted, so not marked):
	// dropped before it.
	for _, to := range []netip.AddrPort{netip.MustParseAddrPort("10.99.0.1:1053"), netip.MustParseAddrPort("[fd00:99::1]:1053")} {
		for _, network := range []string{"udp", "tcp"} {
			for pod := range 2 {
				unanswered = append(unanswered, query{pod, network, to, "the proxy's own address and port"})
			}
		}
	}
	noAnswer(unanswered...)
	mu.Lock()
	for _, s := range seen {
		if s.Addr() != a4.Addr() && s.Addr() != a6.Addr() {
			t.Errorf("the proxy had a query from %v, not pod 0", s)
		}
	}
	mu.Unlock()

	// Another target rewrites the chains, the sets keep their elements.
	if changed, err := h.EnsureDNSRedirect(nft.DNSRedirect{Port4: port}); err != nil || !changed {
		t.Errorf("EnsureDNSRedirect IPv4 only: changed %v, %v", changed, err)
	}
	noAnswer(query{0, "udp", server6, "IPv6 not redirected any more"})
	if got, _, err := ask(0, "udp", cluster4); err != nil || got != "192.0.2.53:1053" {
		t.Errorf("IPv4 still redirected: %q, %v", got, err)
	}

	// Resolvers replaced: the old one is not diverted any more.
	must(t, h.SetDNSResolvers([]netip.Addr{other4.Addr()}))
	noAnswer(query{0, "udp", server4, "a resolver no longer trusted"}, query{0, "tcp", cluster4, "a resolver no longer trusted"})
	if got, _, err := ask(0, "udp", other4); err != nil || got != "192.0.2.54:1053" {
		t.Errorf("the newly trusted resolver: %q, %v", got, err)
	}
	must(t, h.SetDNSResolvers([]netip.Addr{server4.Addr(), server6.Addr()}))

	must(t, h.DeleteDNSPods([]netip.Addr{a4.Addr(), a6.Addr(), b4.Addr(), b6.Addr()}))
	must(t, h.DeleteDNSPods([]netip.Addr{a4.Addr()})) // again: no error
	noAnswer(query{0, "udp", server4, "a pod taken out of the set"}, query{0, "tcp", cluster4, "a pod taken out of the set"})
	must(t, h.DeleteDNSRedirect())
	must(t, h.DeleteDNSRedirect())
	must(t, h.DeleteDNSPods([]netip.Addr{a4.Addr()})) // no table: no error
	if rules, err := h.DNSRedirectRules(); err != nil || rules != nil {
		t.Errorf("rules after delete: %q, %v", rules, err)
	}
}

// nftRun runs nft -f with rules in the namespace at path.
func nftRun(t *testing.T, nftBin, path, rules string) {
	t.Helper()
	must(t, nstest.Run(t, path, func() error {
		cmd := exec.Command(nftBin, "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft: %v: %s\n%s", err, out, rules)
		}
		return nil
	}))
}

// transparent listens with IP_TRANSPARENT (IPV6_TRANSPARENT) and, for
// UDP, IP_RECVORIGDSTADDR (IPV6_RECVORIGDSTADDR), as agent/fqdn does.
var transparent = net.ListenConfig{Control: func(network, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		level, opt, orig := unix.SOL_IP, unix.IP_TRANSPARENT, unix.IP_RECVORIGDSTADDR
		if strings.HasSuffix(network, "6") {
			level, opt, orig = unix.SOL_IPV6, unix.IPV6_TRANSPARENT, unix.IPV6_RECVORIGDSTADDR
		}
		if serr = unix.SetsockoptInt(int(fd), level, opt, 1); serr == nil && strings.HasPrefix(network, "udp") {
			serr = unix.SetsockoptInt(int(fd), level, orig, 1)
		}
	})
	return errors.Join(err, serr)
}}

// serveUDP answers each datagram on pc with its destination, sent from
// that destination (IP_PKTINFO).
func serveUDP(pc *net.UDPConn, saw func(netip.AddrPort)) {
	buf, oob := make([]byte, 512), make([]byte, 256)
	for {
		_, oobn, _, from, err := pc.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return
		}
		saw(from)
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 {
			continue
		}
		sa, err := unix.ParseOrigDstAddr(&msgs[0])
		if err != nil {
			continue
		}
		var dst netip.AddrPort
		var info []byte
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			dst = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
			info = unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: sa.Addr})
		case *unix.SockaddrInet6:
			dst = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
			info = unix.PktInfo6(&unix.Inet6Pktinfo{Addr: sa.Addr})
		}
		pc.WriteMsgUDPAddrPort([]byte(dst.String()), info, from)
	}
}
