package nft_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPortMapsOnlyLocalDestinations is issue 48's capture, at the rules:
// even with elements in the host IP maps whose host IP is another
// machine's address (198.51.100.53, 10.96.0.1, 2001:db8::53; ADD refuses
// them, the test writes them directly), a pod's DNS query and TCP
// connection to those addresses, and the node's own connection, still
// reach that machine, not the pod the elements point at. A host IP of the
// node's own (192.168.99.1, fd00:98::1) is still forwarded to the pod.
func TestPortMapsOnlyLocalDestinations(t *testing.T) {
	t.Parallel()
	l := labtest.New(t, 2) // pod 0 is the attacker, pod 1 the victim
	attacker, victim := l.Pods[0].Path(), l.Pods[1].Path()
	outside := openNS(t, "pmout") // the machine that really has the addresses
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: outside})
	must(t, err)
	var (
		hostOut4, hostOut6 = netip.MustParseAddr("192.168.99.1"), netip.MustParseAddr("fd00:98::1")
		out4, out6         = netip.MustParseAddr("192.168.99.2"), netip.MustParseAddr("fd00:98::2")
		dns, kubeAPI, far6 = netip.MustParseAddr("198.51.100.53"), netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("2001:db8::53")
	)
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut4, 24), netops.AddrOpts{}))
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, outside.EnsureAddr("eth0", netip.PrefixFrom(out4, 24), netops.AddrOpts{}))
	must(t, outside.EnsureAddr("eth0", netip.PrefixFrom(out6, 64), netops.AddrOpts{NoDAD: true}))
	for _, a := range []netip.Addr{dns, kubeAPI, far6} {
		must(t, outside.EnsureAddr("lo", netip.PrefixFrom(a, a.BitLen()), netops.AddrOpts{NoDAD: true}))
		gw := out4
		if a.Is6() {
			gw = out6
		}
		must(t, l.Host.EnsureRoute(netops.Route{Dst: netip.PrefixFrom(a, a.BitLen()), GW: gw, Dev: "vout"}))
	}
	must(t, outside.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), GW: hostOut4, Dev: "eth0"}))
	must(t, outside.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("fd00:99::/64"), GW: hostOut6, Dev: "eth0"}))
	must(t, l.Host.SetSysctls(
		netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"},
	))

	// Each side answers with its name: the attacker on its ports 5353 and
	// 8443, the outside machine on the addresses' own ports.
	pod4, pod6 := labtest.PodAddrs(0)
	pmWho(t, attacker, "udp", netip.AddrPortFrom(netip.IPv6Unspecified(), 5353), "attacker")
	pmWho(t, attacker, "tcp", netip.AddrPortFrom(netip.IPv6Unspecified(), 8443), "attacker")
	pmWho(t, outside.Path(), "udp", netip.AddrPortFrom(dns, 53), "outside")
	pmWho(t, outside.Path(), "tcp", netip.AddrPortFrom(kubeAPI, 443), "outside")
	pmWho(t, outside.Path(), "tcp", netip.AddrPortFrom(far6, 443), "outside")

	_, err = l.Host.NFT().EnsurePortMaps(nft.PortMaps{Owner: "net1 attacker eth0", Mappings: []nft.PortMapping{
		{Proto: nft.ProtoUDP, HostIP: dns, HostPort: 53, PodIP: pod4.Addr(), PodPort: 5353},
		{Proto: nft.ProtoTCP, HostIP: kubeAPI, HostPort: 443, PodIP: pod4.Addr(), PodPort: 8443},
		{Proto: nft.ProtoTCP, HostIP: far6, HostPort: 443, PodIP: pod6.Addr(), PodPort: 8443},
		{Proto: nft.ProtoTCP, HostIP: hostOut4, HostPort: 8443, PodIP: pod4.Addr(), PodPort: 8443},
		{Proto: nft.ProtoTCP, HostIP: hostOut6, HostPort: 8443, PodIP: pod6.Addr(), PodPort: 8443},
	}})
	must(t, err)

	for _, tc := range []struct {
		name, from, proto string
		to                netip.AddrPort
		want              string
	}{
		{"a pod's DNS query to 198.51.100.53", victim, "udp", netip.AddrPortFrom(dns, 53), "outside"},
		{"a pod's connection to 10.96.0.1:443", victim, "tcp", netip.AddrPortFrom(kubeAPI, 443), "outside"},
		{"the node's connection to 10.96.0.1:443", l.Host.Path(), "tcp", netip.AddrPortFrom(kubeAPI, 443), "outside"},
		{"a pod's connection to [2001:db8::53]:443", victim, "tcp", netip.AddrPortFrom(far6, 443), "outside"},
		{"the node's connection to [2001:db8::53]:443", l.Host.Path(), "tcp", netip.AddrPortFrom(far6, 443), "outside"},
		{"the node's own address, from outside", outside.Path(), "tcp", netip.AddrPortFrom(hostOut4, 8443), "attacker"},
		{"the node's own IPv6 address, from outside", outside.Path(), "tcp", netip.AddrPortFrom(hostOut6, 8443), "attacker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pmAskWho(t, tc.from, tc.proto, tc.to)
			if err != nil || got != tc.want {
				t.Errorf("%s %s answered by %q (%v), want %q", tc.proto, tc.to, got, err, tc.want)
			}
		})
	}
}

// pmWho serves name over proto at ap inside the namespace at ns: TCP
// writes it to every connection, UDP answers every datagram with it.
func pmWho(t *testing.T, ns, proto string, ap netip.AddrPort, name string) {
	t.Helper()
	var closer io.Closer
	must(t, nstest.Run(t, ns, func() error {
		if proto == "udp" {
			c, err := net.ListenPacket("udp", ap.String())
			if err != nil {
				return err
			}
			closer = c
			go func() {
				buf := make([]byte, 512)
				for {
					_, from, err := c.ReadFrom(buf)
					if err != nil {
						return
					}
					c.WriteTo([]byte(name), from)
				}
			}()
			return nil
		}
		ln, err := net.Listen("tcp", ap.String())
		if err != nil {
			return err
		}
		closer = ln
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, name)
				c.Close()
			}
		}()
		return nil
	}))
	t.Cleanup(func() { closer.Close() })
}

// pmAskWho asks the server at to over proto from the namespace at from for
// its name. A UDP query is sent again after 2 s without an answer, three
// times, as a resolver does; TCP resends its SYN itself.
func pmAskWho(t *testing.T, from, proto string, to netip.AddrPort) (string, error) {
	t.Helper()
	var c net.Conn
	if err := nstest.Run(t, from, func() error {
		var err error
		c, err = net.DialTimeout(proto, to.String(), 10*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	buf := make([]byte, 512)
	if proto == "tcp" {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c) // the server closes after its name
		return string(b), err
	}
	var err error
	for range 3 {
		if _, err = c.Write([]byte("who")); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var n int
		if n, err = c.Read(buf); err == nil {
			return string(buf[:n]), nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return "", err
		}
	}
	return "", err
}
