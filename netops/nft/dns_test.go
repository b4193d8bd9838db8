package nft_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestDNSRedirect: pods in the DNS table's sets reach a listener on the
// node (the proxy's stand-in) when they send DNS, over UDP and TCP, IPv4
// and IPv6, to any server; the listener's conntrack lookup finds the
// server they asked for; pods not in the sets, other ports and removed
// pods are not redirected; Ensure and Delete are idempotent.
func TestDNSRedirect(t *testing.T) {
	l := labtest.New(t, 2)
	h := l.Host.NFT()
	to4 := netip.MustParseAddrPort("10.99.0.1:1053")
	to6 := netip.MustParseAddrPort("[fd00:99::1]:1053")
	server4 := netip.MustParseAddrPort("192.0.2.53:53") // nowhere: only the DNAT answers
	server6 := netip.MustParseAddrPort("[2001:db8::53]:53")
	must(t, l.Host.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("192.0.2.0/24"), Dev: "br0"}))

	// The stand-in proxy: it answers each datagram and connection with
	// the original destination conntrack gives it.
	var ct *netops.Conntrack
	must(t, nstest.Run(t, l.Host.Path(), func() error {
		var err error
		ct, err = netops.OpenConntrack("")
		return err
	}))
	t.Cleanup(func() { ct.Close() })
	for _, to := range []netip.AddrPort{to4, to6} {
		must(t, nstest.Run(t, l.Host.Path(), func() error {
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(to))
			if err != nil {
				return err
			}
			t.Cleanup(func() { pc.Close() })
			go func() {
				buf := make([]byte, 512)
				for {
					_, from, err := pc.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					dst, dnat, err := ct.ReplyOrigDst(unix.IPPROTO_UDP, to, from)
					msg := dst.String()
					if err != nil || !dnat {
						msg = "lookup failed"
					}
					pc.WriteToUDPAddrPort([]byte(msg), from)
				}
			}()
			ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(to))
			if err != nil {
				return err
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.AcceptTCP()
					if err != nil {
						return
					}
					from := netip.MustParseAddrPort(c.RemoteAddr().String())
					dst, _, err := ct.ReplyOrigDst(unix.IPPROTO_TCP, to, from)
					msg := dst.String()
					if err != nil {
						msg = "lookup failed"
					}
					c.Write([]byte(msg))
					c.Close()
				}
			}()
			return nil
		}))
	}

	ask := func(pod int, network string, server netip.AddrPort) (string, error) {
		var got string
		err := nstest.Run(t, l.Pods[pod].Path(), func() error {
			c, err := net.DialTimeout(network, server.String(), 700*time.Millisecond)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(700 * time.Millisecond))
			if network == "udp" {
				if _, err := c.Write([]byte("q")); err != nil {
					return err
				}
			}
			b := make([]byte, 128)
			n, err := c.Read(b)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			got = string(b[:n])
			return nil
		})
		return got, err
	}
	a4, a6 := labtest.PodAddrs(0)

	must(t, h.EnsureDNSPods([]netip.Addr{a4.Addr(), a6.Addr()}))
	must(t, h.EnsureDNSPods([]netip.Addr{a4.Addr()})) // again: no error
	changed, err := h.EnsureDNSRedirect(nft.DNSRedirect{To4: to4, To6: to6})
	must(t, err)
	if !changed {
		t.Errorf("EnsureDNSRedirect on a new table: changed false")
	}
	if changed, err := h.EnsureDNSRedirect(nft.DNSRedirect{To4: to4, To6: to6}); err != nil || changed {
		t.Errorf("EnsureDNSRedirect again: changed %v, %v; want false, nil", changed, err)
	}
	rules, err := h.DNSRedirectRules()
	must(t, err)
	if len(rules) != 4 {
		t.Errorf("rules %q, want 4", rules)
	}
	pods, err := h.DNSPods()
	must(t, err)
	if !slices.Equal(pods, []netip.Addr{a4.Addr(), a6.Addr()}) {
		t.Errorf("DNSPods = %v", pods)
	}

	for _, server := range []netip.AddrPort{server4, server6} {
		for _, network := range []string{"udp", "tcp"} {
			got, err := ask(0, network, server)
			if err != nil || got != server.String() {
				t.Errorf("pod 0 %s to %v: %q, %v; want the proxy's answer %q", network, server, got, err, server)
			}
			if got, err := ask(1, network, server); err == nil {
				t.Errorf("pod 1 (not in the set) %s to %v answered %q", network, server, got)
			}
		}
	}
	if got, err := ask(0, "tcp", netip.AddrPortFrom(server4.Addr(), 54)); err == nil {
		t.Errorf("pod 0 to port 54 answered %q", got)
	}

	// Another target rewrites the chain, the sets keep their elements.
	if changed, err := h.EnsureDNSRedirect(nft.DNSRedirect{To4: to4}); err != nil || !changed {
		t.Errorf("EnsureDNSRedirect IPv4 only: changed %v, %v", changed, err)
	}
	if got, err := ask(0, "udp", server6); err == nil {
		t.Errorf("IPv6 not redirected any more, yet answered %q", got)
	}
	if got, err := ask(0, "udp", server4); err != nil || got != server4.String() {
		t.Errorf("IPv4 still redirected: %q, %v", got, err)
	}

	must(t, h.DeleteDNSPods([]netip.Addr{a4.Addr(), a6.Addr()}))
	must(t, h.DeleteDNSPods([]netip.Addr{a4.Addr()})) // again: no error
	if got, err := ask(0, "udp", server4); err == nil {
		t.Errorf("removed pod still redirected: %q", got)
	}
	must(t, h.DeleteDNSRedirect())
	must(t, h.DeleteDNSRedirect())
	must(t, h.DeleteDNSPods([]netip.Addr{a4.Addr()})) // no table: no error
	if rules, err := h.DNSRedirectRules(); err != nil || rules != nil {
		t.Errorf("rules after delete: %q, %v", rules, err)
	}
}
