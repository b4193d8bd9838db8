package nft_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// Go's net package has no SCTP: the test's server and client are
// one-to-one (SOCK_STREAM) SCTP sockets, handed to the net package once
// they listen or are connected (it takes any stream socket for a TCP one).

// sctpSocket opens an SCTP socket of a's family in the namespace at
// nsPath, non-blocking (os.NewFile then polls it); on a kernel without
// SCTP sockets the test skips, saying so (and fails inside make
// test-kernel, whose kernel has them).
func sctpSocket(t *testing.T, nsPath string, a netip.Addr) *os.File {
	t.Helper()
	family := unix.AF_INET6
	if a.Is4() {
		family = unix.AF_INET
	}
	var fd int
	err := nstest.Run(t, nsPath, func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
		return err
	})
	if errors.Is(err, unix.ESOCKTNOSUPPORT) {
		err = fmt.Errorf("%w (%w)", unix.EPROTONOSUPPORT, err)
	}
	nstest.SkipIfKernelLacks(t, "SCTP sockets", err)
	must(t, err)
	return os.NewFile(uintptr(fd), "sctp")
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// sctpServe listens on SCTP ap in the namespace and answers each
// association with the peer's primary address as it sees it (the source
// of the client's INIT), as nstest.Serve does for TCP.
func sctpServe(t *testing.T, nsPath string, ap netip.AddrPort) {
	t.Helper()
	f := sctpSocket(t, nsPath, ap.Addr())
	defer f.Close() // FileListener keeps a dup
	must(t, unix.Bind(int(f.Fd()), sockaddr(ap)))
	must(t, unix.Listen(int(f.Fd()), 16))
	ln, err := net.FileListener(f)
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().String())
			c.Close()
		}
	}()
}

// sctpSeenFrom associates from the namespace at nsPath with to and returns
// the address the server of sctpServe saw, or why the association failed:
// ECONNREFUSED when an ICMP port unreachable answered the INIT (the
// socket reports ICMP errors: IP_RECVERR), a timeout when nothing did
// within 10 s.
func sctpSeenFrom(t *testing.T, nsPath string, to netip.AddrPort) (netip.Addr, error) {
	t.Helper()
	f := sctpSocket(t, nsPath, to.Addr())
	defer f.Close()
	fd := int(f.Fd())
	if to.Addr().Is4() {
		must(t, unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1))
	} else {
		must(t, unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1))
	}
	if err := unix.Connect(fd, sockaddr(to)); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return netip.Addr{}, fmt.Errorf("connect SCTP %v: %w", to, err)
	}
	// A one-to-one SCTP socket turns writable when its association is up
	// (sctp_poll), or reports the error that ended it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return netip.Addr{}, fmt.Errorf("SCTP %v: no association within 10 s: %w", to, os.ErrDeadlineExceeded)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		must(t, err)
		if n > 0 {
			break
		}
	}
	if soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
		return netip.Addr{}, fmt.Errorf("SCTP %v: %w", to, errors.Join(err, unix.Errno(soErr)))
	}
	c, err := net.FileConn(f)
	must(t, err)
	defer c.Close()
	must(t, c.SetDeadline(deadline))
	b, err := io.ReadAll(c)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("SCTP %v: read: %w", to, err)
	}
	ap, err := netip.ParseAddrPort(string(b))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("SCTP %v answered %q: %w", to, b, err)
	}
	return ap.Addr().Unmap(), nil
}

// TestServicesSCTP: SCTP Services carry associations as TCP ones do
// (kube-proxy serves SCTP where the kernel has it): a ClusterIP reaches
// the backend with the client's own address (the client is of
// --cluster-cidr), the NodePort of a Cluster policy masqueraded to the
// node, the NodePort of a Local policy with the client's address, each
// SCTP frontend an element of its own (a TCP Service on the same address
// and port does not take the SCTP one's associations), and a Service
// without endpoints refuses the INIT (ICMP port unreachable) instead of
// leaving it unanswered. Skipped where the kernel has no SCTP sockets
// (this machine's); make test-kernel runs it on Debian's 6.1.
func TestServicesSCTP(t *testing.T) {
	l := labtest.New(t, 2)
	a4, a6 := labtest.PodAddrs(0)
	b4, _ := labtest.PodAddrs(1)
	epA, epA6, epB := netip.AddrPortFrom(a4.Addr(), 9000), netip.AddrPortFrom(a6.Addr(), 9000), netip.AddrPortFrom(b4.Addr(), 9000)
	sctpServe(t, l.Pods[0].Path(), epA) // (skips here without SCTP)
	sctpServe(t, l.Pods[0].Path(), epA6)
	sctpServe(t, l.Pods[1].Path(), epB)
	tcpWho(t, l.Pods[1].Path(), epB) // the TCP Service's backend, on the same port

	client := openNS(t, "svcs")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: client})
	must(t, err)
	hostOut, cli := netip.MustParseAddr("192.168.99.1"), netip.MustParseAddr("192.168.99.2")
	hostOut6, cli6 := netip.MustParseAddr("fd00:98::1"), netip.MustParseAddr("fd00:98::2")
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut, 24), netops.AddrOpts{}))
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, client.EnsureAddr("eth0", netip.PrefixFrom(cli, 24), netops.AddrOpts{}))
	must(t, client.EnsureAddr("eth0", netip.PrefixFrom(cli6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, client.EnsureRoute(netops.Route{GW: hostOut, Dev: "eth0"}))
	must(t, client.EnsureRoute(netops.Route{GW: hostOut6, Dev: "eth0"}))
	must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))

	nstest.WaitIPv6LinkLocal(t, l.Host.Path(), "vout") // (the node forwards IPv6 to the client)
	v4, v6 := svcmodel.IPv4, svcmodel.IPv6
	ep := func(ap netip.AddrPort, local bool) svcmodel.Endpoint {
		return svcmodel.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, Local: local}
	}
	only := []svcmodel.Endpoint{ep(epA, true)}
	cip, cip6, tcpOnly, dead := netip.MustParseAddr("10.96.0.30"), netip.MustParseAddr("fd96::30"),
		netip.MustParseAddr("10.96.0.31"), netip.MustParseAddr("10.96.0.32")
	port := func(name string, f svcmodel.Family, proto svcmodel.Proto, eps []svcmodel.Endpoint, fes ...svcmodel.Frontend) svcmodel.ServicePort {
		return svcmodel.ServicePort{Name: svcmodel.PortName{Namespace: "t", Name: name}, Family: f, Protocol: proto,
			Frontends: fes, ClusterEndpoints: eps, LocalEndpoints: eps, HasEndpoints: len(eps) > 0}
	}
	local := port("local", v4, svcmodel.SCTP, []svcmodel.Endpoint{ep(epB, true)}, svcmodel.Frontend{Kind: svcmodel.NodePort, Family: v4, Port: 30301})
	local.ExternalLocal = true
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{hostOut, hostOut6},
		// The client is of the cluster: its ClusterIP traffic keeps its
		// address (the pods route back through the node).
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("192.168.99.0/24"),
			netip.MustParsePrefix("fd00:99::/64"), netip.MustParsePrefix("fd00:98::/64")},
		Ports: []svcmodel.ServicePort{ // (sorted by name)
			port("dead", v4, svcmodel.SCTP, nil, svcmodel.Frontend{Kind: svcmodel.ClusterIP, Addr: dead, Family: v4, Port: 9}),
			local,
			port("sctp", v4, svcmodel.SCTP, only, svcmodel.Frontend{Kind: svcmodel.ClusterIP, Addr: cip, Family: v4, Port: 9},
				svcmodel.Frontend{Kind: svcmodel.NodePort, Family: v4, Port: 30300}),
			port("sctp", v6, svcmodel.SCTP, []svcmodel.Endpoint{ep(epA6, true)}, svcmodel.Frontend{Kind: svcmodel.ClusterIP, Addr: cip6, Family: v6, Port: 9},
				svcmodel.Frontend{Kind: svcmodel.NodePort, Family: v6, Port: 30300}),
			port("tcp", v4, svcmodel.TCP, []svcmodel.Endpoint{ep(epB, false)}, svcmodel.Frontend{Kind: svcmodel.ClusterIP, Addr: tcpOnly, Family: v4, Port: 9}),
		},
	}
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(snap))
	t.Cleanup(func() { s.Delete() })

	masq, masq6 := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("fd00:99::1")
	for _, c := range []struct {
		what string
		to   netip.AddrPort
		want netip.Addr
	}{
		{"ClusterIP (a client of the cluster: its own address)", netip.AddrPortFrom(cip, 9), cli},
		{"IPv6 ClusterIP", netip.AddrPortFrom(cip6, 9), cli6},
		{"NodePort, policy Cluster (masqueraded)", netip.AddrPortFrom(hostOut, 30300), masq},
		{"IPv6 NodePort, policy Cluster (masqueraded)", netip.AddrPortFrom(hostOut6, 30300), masq6},
		{"NodePort, policy Local (the client's address)", netip.AddrPortFrom(hostOut, 30301), cli},
	} {
		got, err := sctpSeenFrom(t, client.Path(), c.to)
		if err != nil || got != c.want {
			t.Errorf("SCTP %s %v: seen from %v (%v), want %v", c.what, c.to, got, err, c.want)
		}
	}
	// Only TCP is served on tcpOnly:9: an SCTP INIT there is not the TCP
	// Service's (no Service: the node has no such address, and nothing
	// answers, or an ICMP error does).
	if got, err := sctpSeenFrom(t, client.Path(), netip.AddrPortFrom(tcpOnly, 9)); err == nil {
		t.Errorf("SCTP to a TCP-only Service reached %v", got)
	}
	if got := who(t, client.Path(), netip.AddrPortFrom(tcpOnly, 9)); got != epB.Addr().String() {
		t.Errorf("the TCP Service beside the SCTP ones reached %q, want %v", got, epB.Addr())
	}
	if _, err := sctpSeenFrom(t, client.Path(), netip.AddrPortFrom(dead, 9)); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("SCTP Service without endpoints: %v, want the INIT refused (ECONNREFUSED from ICMP port unreachable)", err)
	}
}
