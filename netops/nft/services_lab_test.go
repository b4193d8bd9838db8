package nft_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/google/nftables"
)

// TestServicesTraffic: the services table in a "node" namespace (the lab's
// host, pods on its bridge) serves a client routed from outside: a
// ClusterIP and a NodePort reach a backend, masqueraded (the client is
// not of the cluster); a NodePort of policy Local keeps the client's
// address; a Service without endpoints refuses the connection (TCP RST)
// instead of letting it time out.
func TestServicesTraffic(t *testing.T) {
	l := labtest.New(t, 2)
	client := openNS(t, "svcc")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: client})
	must(t, err)
	hostOut, cli := netip.MustParseAddr("192.168.99.1"), netip.MustParseAddr("192.168.99.2")
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut, 24), netops.AddrOpts{}))
	must(t, client.EnsureAddr("eth0", netip.PrefixFrom(cli, 24), netops.AddrOpts{}))
	must(t, client.EnsureRoute(netops.Route{GW: hostOut, Dev: "eth0"}))
	must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"}))

	a4, _ := labtest.PodAddrs(0)
	b4, _ := labtest.PodAddrs(1)
	srvA := nstest.Serve(t, l.Pods[0].Path(), a4.Addr())
	srvB := nstest.Serve(t, l.Pods[1].Path(), b4.Addr())
	ep := func(ap netip.AddrPort, local bool) svcmodel.Endpoint {
		return svcmodel.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, Local: local}
	}
	both := []svcmodel.Endpoint{ep(srvA, true), ep(srvB, false)}
	v4 := svcmodel.IPv4
	cip, dead := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.11")
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{hostOut},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")},
		Ports: []svcmodel.ServicePort{
			{Name: svcmodel.PortName{Namespace: "t", Name: "web"}, Family: v4, Protocol: svcmodel.TCP,
				Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: cip, Family: v4, Port: 80},
					{Kind: svcmodel.NodePort, Family: v4, Port: 30080}},
				ClusterEndpoints: both, LocalEndpoints: both[:1], HasEndpoints: true},
			{Name: svcmodel.PortName{Namespace: "t", Name: "local"}, Family: v4, Protocol: svcmodel.TCP,
				Frontends:        []svcmodel.Frontend{{Kind: svcmodel.NodePort, Family: v4, Port: 30081}},
				ClusterEndpoints: both, LocalEndpoints: both[:1], HasEndpoints: true, ExternalLocal: true},
			{Name: svcmodel.PortName{Namespace: "t", Name: "dead"}, Family: v4, Protocol: svcmodel.TCP,
				Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: dead, Family: v4, Port: 80}}},
		},
	}
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(snap))
	t.Cleanup(func() { s.Delete() })

	// The bridge's address: the node masquerades to the pods' network.
	masq := netip.MustParseAddr("10.99.0.1")
	for _, to := range []netip.AddrPort{netip.AddrPortFrom(cip, 80), netip.AddrPortFrom(hostOut, 30080)} {
		if got := nstest.SeenFrom(t, client.Path(), to); got != masq {
			t.Errorf("connection to %v seen from %v, want %v (masqueraded)", to, got, masq)
		}
	}
	if got := nstest.SeenFrom(t, client.Path(), netip.AddrPortFrom(hostOut, 30081)); got != cli {
		t.Errorf("NodePort of policy Local seen from %v, want the client's %v", got, cli)
	}
	err = dial(t, client.Path(), netip.AddrPortFrom(dead, 80))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a Service without endpoints: %v, want connection refused", err)
	}
	// The endpoint leaves: the ClusterIP now reaches only the other.
	snap2 := *snap
	snap2.Ports = append([]svcmodel.ServicePort(nil), snap.Ports...)
	snap2.Ports[0].ClusterEndpoints = both[1:]
	must(t, s.Apply(&snap2))
	for range 8 {
		if got := nstest.SeenFrom(t, client.Path(), netip.AddrPortFrom(cip, 80)); got != masq {
			t.Fatalf("after the change: seen from %v", got)
		}
	}
}

// udpWho answers each datagram on ap in the namespace with ap's address.
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

// TestServicesUDPConntrack: a UDP client keeps its socket (as a resolver
// does); when the endpoint it was sent to leaves the Service, Apply has
// its conntrack entry deleted (ClearConntrack), and the next datagram
// reaches the other endpoint instead of the one that left.
func TestServicesUDPConntrack(t *testing.T) {
	l := labtest.New(t, 2)
	a4, _ := labtest.PodAddrs(0)
	b4, _ := labtest.PodAddrs(1)
	client := openNS(t, "svcu")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: client})
	must(t, err)
	hostOut, cli := netip.MustParseAddr("192.168.99.1"), netip.MustParseAddr("192.168.99.2")
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut, 24), netops.AddrOpts{}))
	must(t, client.EnsureAddr("eth0", netip.PrefixFrom(cli, 24), netops.AddrOpts{}))
	must(t, client.EnsureRoute(netops.Route{GW: hostOut, Dev: "eth0"}))
	must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"}))
	epA, epB := netip.AddrPortFrom(a4.Addr(), 53), netip.AddrPortFrom(b4.Addr(), 53)
	udpWho(t, l.Pods[0].Path(), epA)
	udpWho(t, l.Pods[1].Path(), epB)
	cip := netip.MustParseAddr("10.96.0.10")
	eps := []svcmodel.Endpoint{{Addr: epA.Addr(), Port: 53, Ready: true}, {Addr: epB.Addr(), Port: 53, Ready: true}}
	snap := func(eps []svcmodel.Endpoint) *svcmodel.Snapshot {
		return &svcmodel.Snapshot{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")},
			Ports: []svcmodel.ServicePort{{Name: svcmodel.PortName{Namespace: "kube-system", Name: "dns"}, Family: svcmodel.IPv4, Protocol: svcmodel.UDP,
				Frontends:        []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: cip, Family: svcmodel.IPv4, Port: 53}},
				ClusterEndpoints: eps, HasEndpoints: true}}}
	}
	var cleared []netip.AddrPort
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{ClearConntrack: func(gone []netip.AddrPort) error {
		cleared = append(cleared, gone...)
		_, err := l.Host.DeleteConntrackTo(gone)
		return err
	}})
	must(t, s.Apply(snap(eps)))
	t.Cleanup(func() { s.Delete() })

	// The client is routed to the node from outside (masqueraded: the
	// answers come back through the node).
	var c *net.UDPConn
	must(t, nstest.Run(t, client.Path(), func() (err error) {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(cli, 5353)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(cip, 53)))
		return err
	}))
	t.Cleanup(func() { c.Close() })
	ask := func() string {
		t.Helper()
		must(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		_, err := c.Write([]byte("?"))
		must(t, err)
		b := make([]byte, 64)
		n, err := c.Read(b)
		must(t, err)
		return string(b[:n])
	}
	first := ask()
	if again := ask(); again != first {
		t.Fatalf("one socket's datagrams reached %s, then %s", first, again)
	}
	var left, other []svcmodel.Endpoint
	for _, e := range eps {
		if e.Addr.String() == first {
			left = append(left, e)
		} else {
			other = append(other, e)
		}
	}
	must(t, s.Apply(snap(other)))
	if len(cleared) != 1 || cleared[0] != netip.AddrPortFrom(left[0].Addr, 53) {
		t.Errorf("ClearConntrack got %v, want the endpoint that left, %v", cleared, left)
	}
	if got := ask(); got != other[0].Addr.String() {
		t.Errorf("after %s left, the client's next datagram reached %s, want %s", first, got, other[0].Addr)
	}
}

// tcpWho answers each connection on ap in the namespace with ap's address
// (which backend answered), closing it.
func tcpWho(t *testing.T, nsPath string, ap netip.AddrPort) {
	var ln net.Listener
	must(t, nstest.Run(t, nsPath, func() (err error) { ln, err = net.Listen("tcp", ap.String()); return err }))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(ap.Addr().String()))
			c.Close()
		}
	}()
}

// who connects from nsPath to to and returns what the server said.
func who(t *testing.T, nsPath string, to netip.AddrPort) string {
	t.Helper()
	var c net.Conn
	must(t, nstest.Run(t, nsPath, func() (err error) { c, err = net.DialTimeout("tcp", to.String(), 10*time.Second); return err }))
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	b := make([]byte, 64)
	n, _ := c.Read(b)
	return string(b[:n])
}

// TestServicesHairpinAffinity: a pod reaching its own Service lands on
// itself masqueraded (else its own answer would come from its address,
// not the Service's, and the connection fail), in both families; a
// Service with sessionAffinity ClientIP sends a client's connections,
// from new ports each, to one backend, and without it they spread.
func TestServicesHairpinAffinity(t *testing.T) {
	l := labtest.New(t, 2)
	a4, a6 := labtest.PodAddrs(0)
	b4, _ := labtest.PodAddrs(1)
	must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	srv4 := nstest.Serve(t, l.Pods[0].Path(), a4.Addr())
	srv6 := nstest.Serve(t, l.Pods[0].Path(), a6.Addr())
	wA, wB := netip.AddrPortFrom(a4.Addr(), 7070), netip.AddrPortFrom(b4.Addr(), 7070)
	tcpWho(t, l.Pods[0].Path(), wA)
	tcpWho(t, l.Pods[1].Path(), wB)
	cip4, cip6 := netip.MustParseAddr("10.96.0.20"), netip.MustParseAddr("fd96::20")
	aff, spread := netip.MustParseAddr("10.96.0.21"), netip.MustParseAddr("10.96.0.22")
	ep := func(ap netip.AddrPort) svcmodel.Endpoint {
		return svcmodel.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true}
	}
	sp := func(name string, f svcmodel.Family, cip netip.Addr, eps ...netip.AddrPort) svcmodel.ServicePort {
		p := svcmodel.ServicePort{Name: svcmodel.PortName{Namespace: "t", Name: name}, Family: f, Protocol: svcmodel.TCP,
			Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: cip, Family: f, Port: 80}}, HasEndpoints: true}
		for _, e := range eps {
			p.ClusterEndpoints = append(p.ClusterEndpoints, ep(e))
		}
		return p
	}
	affinity := sp("aff", svcmodel.IPv4, aff, wA, wB)
	affinity.AffinityTimeout = time.Hour
	short := sp("short", svcmodel.IPv4, netip.MustParseAddr("10.96.0.23"), wA, wB)
	short.AffinityTimeout = time.Second
	snap := &svcmodel.Snapshot{
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("fd00:99::/64")},
		Ports: []svcmodel.ServicePort{sp("self", svcmodel.IPv4, cip4, srv4), sp("self", svcmodel.IPv6, cip6, srv6),
			affinity, short, sp("spread", svcmodel.IPv4, spread, wA, wB)},
	}
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(snap))
	t.Cleanup(func() { s.Delete() })

	for _, c := range []struct {
		to   netip.AddrPort
		node netip.Addr
	}{{netip.AddrPortFrom(cip4, 80), netip.MustParseAddr("10.99.0.1")}, {netip.AddrPortFrom(cip6, 80), netip.MustParseAddr("fd00:99::1")}} {
		if got := nstest.SeenFrom(t, l.Pods[0].Path(), c.to); got != c.node {
			t.Errorf("a pod through its own Service %v lands on itself seen from %v, want the node's %v (hairpin masquerade)", c.to, got, c.node)
		}
	}
	// A client routed from outside (a pod of the bridge would get its
	// answers bridged, past the node's conntrack).
	client := openNS(t, "svca")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: client})
	must(t, err)
	must(t, l.Host.EnsureAddr("vout", netip.MustParsePrefix("192.168.99.1/24"), netops.AddrOpts{}))
	must(t, client.EnsureAddr("eth0", netip.MustParsePrefix("192.168.99.2/24"), netops.AddrOpts{}))
	must(t, client.EnsureRoute(netops.Route{GW: netip.MustParseAddr("192.168.99.1"), Dev: "eth0"}))
	seen := map[string]int{}
	for range 12 {
		seen[who(t, client.Path(), netip.AddrPortFrom(aff, 80))]++
	}
	if len(seen) != 1 {
		t.Errorf("sessionAffinity ClientIP: one client's connections reached %v, want one backend", seen)
	}
	spreadSeen := map[string]int{}
	for range 24 {
		spreadSeen[who(t, client.Path(), netip.AddrPortFrom(spread, 80))]++
	}
	if len(spreadSeen) != 2 {
		t.Errorf("without affinity 24 connections reached %v, want both backends", spreadSeen)
	}
	// Once a client's affinity has expired, its next connection is a new
	// choice, as kube-proxy's (the spec "should have session affinity
	// timeout work"): not its address's hash again, which would send it
	// to the same backend for ever. Each round waits for the client's
	// entry to expire; two backends, 30 rounds: 2^-29 to see one alone.
	shortTo := netip.AddrPortFrom(short.Frontends[0].Addr, 80)
	afterExpiry := map[string]int{}
	for range 30 {
		afterExpiry[who(t, client.Path(), shortTo)]++
		if len(afterExpiry) == 2 {
			break
		}
		waitAffinityExpired(t, l.Host.Path(), time.Second)
	}
	if len(afterExpiry) != 2 {
		t.Errorf("sessionAffinity ClientIP with a 1 s timeout: a client's connections after each expiry reached %v, want both backends", afterExpiry)
	}
}

// waitAffinityExpired waits until the services table's affinity map of
// the Service whose timeout is timeout holds no client.
func waitAffinityExpired(t *testing.T, nsPath string, timeout time.Duration) {
	t.Helper()
	ns, err := os.Open(nsPath)
	must(t, err)
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	must(t, err)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var af *nftables.Set
		for _, name := range nft.ServicesTables() {
			sets, err := c.GetSets(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
			must(t, err)
			for _, s := range sets {
				if strings.HasPrefix(s.Name, "af-") && s.Timeout == timeout {
					af = s
				}
			}
		}
		if af == nil {
			t.Fatalf("no affinity map with a %v timeout in %v", timeout, nsPath)
		}
		els, err := c.GetSetElements(af)
		must(t, err)
		if len(els) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("affinity map %s still holds %d clients a minute on", af.Name, len(els))
		}
	}
}
