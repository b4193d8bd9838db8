package nft_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// extLab is the lab of the external traffic tests: the lab's host is the
// node (pods on its bridge), and an "outside" namespace is routed to it
// over vout (192.168.99.0/24, fd00:98::/64), off the cluster.
type extLab struct {
	*labtest.Lab
	out                *netops.Handle
	hostOut, hostOut6  netip.Addr // the node's addresses on vout
	masq, masq6        netip.Addr // the node's on the bridge: masqueraded traffic comes from them
	cli, cli6          netip.Addr // the outside client's first addresses
	srvA, srvA6, srvB6 netip.AddrPort
}

func newExtLab(t *testing.T) *extLab {
	l := &extLab{Lab: labtest.New(t, 2), out: openNS(t, "svco"),
		hostOut: netip.MustParseAddr("192.168.99.1"), hostOut6: netip.MustParseAddr("fd00:98::1"),
		masq: netip.MustParseAddr("10.99.0.1"), masq6: netip.MustParseAddr("fd00:99::1"),
		cli: netip.MustParseAddr("192.168.99.2"), cli6: netip.MustParseAddr("fd00:98::2")}
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: l.out})
	must(t, err)
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(l.hostOut, 24), netops.AddrOpts{}))
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(l.hostOut6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, l.out.EnsureAddr("eth0", netip.PrefixFrom(l.cli, 24), netops.AddrOpts{}))
	must(t, l.out.EnsureAddr("eth0", netip.PrefixFrom(l.cli6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, l.out.EnsureRoute(netops.Route{GW: l.hostOut, Dev: "eth0"}))
	must(t, l.out.EnsureRoute(netops.Route{GW: l.hostOut6, Dev: "eth0"}))
	must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	nstest.WaitIPv6LinkLocal(t, l.Host.Path(), "vout") // (the node forwards IPv6 to the client)
	a4, a6 := labtest.PodAddrs(0)
	_, b6 := labtest.PodAddrs(1)
	l.srvA = nstest.Serve(t, l.Pods[0].Path(), a4.Addr())
	l.srvA6 = nstest.Serve(t, l.Pods[0].Path(), a6.Addr())
	l.srvB6 = nstest.Serve(t, l.Pods[1].Path(), b6.Addr())
	return l
}

// addClient gives the outside namespace one more address (a second
// client, on the same link).
func (l *extLab) addClient(t *testing.T, a netip.Addr) {
	bits := 24
	if a.Is6() {
		bits = 64
	}
	must(t, l.out.EnsureAddr("eth0", netip.PrefixFrom(a, bits), netops.AddrOpts{NoDAD: true}))
}

// seenFromAddr connects from src in the namespace at nsPath to a server
// of nstest.Serve at to and returns the address the server saw, or why it
// could not connect within 2 s (what the rules drop times out).
func seenFromAddr(t *testing.T, nsPath string, src netip.Addr, to netip.AddrPort) (netip.Addr, error) {
	t.Helper()
	var c net.Conn
	err := nstest.Run(t, nsPath, func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
		c, err = d.Dial("tcp", to.String())
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	b, err := io.ReadAll(c)
	must(t, err)
	ap, err := netip.ParseAddrPort(string(b))
	must(t, err)
	return ap.Addr().Unmap(), nil
}

// dropped reports whether err is a connection attempt that timed out:
// what a rule that drops the SYN does (a reject refuses it at once).
func dropped(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// TestServicesSourceRanges: a LoadBalancer Service with
// loadBalancerSourceRanges, in both families: a client inside the ranges
// reaches the backend through the load balancer's IP, one outside them is
// dropped (not refused: kube-proxy drops), and the ranges gate only the
// load balancer's IP: the same outside client still reaches the Service's
// NodePort and ClusterIP, and a LoadBalancer Service without ranges
// serves it.
func TestServicesSourceRanges(t *testing.T) {
	l := newExtLab(t)
	in, in6 := l.cli, l.cli6
	outside, outside6 := netip.MustParseAddr("192.168.99.100"), netip.MustParseAddr("fd00:98::100")
	l.addClient(t, outside)
	l.addClient(t, outside6)
	v4, v6 := svcmodel.IPv4, svcmodel.IPv6
	lb, lb6 := netip.MustParseAddr("203.0.113.50"), netip.MustParseAddr("2001:db8:50::50")
	open, open6 := netip.MustParseAddr("203.0.113.51"), netip.MustParseAddr("2001:db8:50::51")
	cip, cip6 := netip.MustParseAddr("10.96.0.50"), netip.MustParseAddr("fd96::50")
	ep := func(ap netip.AddrPort) []svcmodel.Endpoint {
		return []svcmodel.Endpoint{{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, Local: true}}
	}
	port := func(name string, f svcmodel.Family, eps []svcmodel.Endpoint, ranges []netip.Prefix, fes ...svcmodel.Frontend) svcmodel.ServicePort {
		return svcmodel.ServicePort{Name: svcmodel.PortName{Namespace: "t", Name: name}, Family: f, Protocol: svcmodel.TCP,
			Frontends: fes, ClusterEndpoints: eps, LocalEndpoints: eps, HasEndpoints: true, SourceRanges: ranges}
	}
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{l.hostOut, l.hostOut6},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("fd00:99::/64")},
		Ports: []svcmodel.ServicePort{
			port("fw", v4, ep(l.srvA), []netip.Prefix{netip.MustParsePrefix("192.168.99.0/27"), netip.MustParsePrefix("198.51.100.0/24")},
				svcmodel.Frontend{Kind: svcmodel.ClusterIP, Addr: cip, Family: v4, Port: 80},
				svcmodel.Frontend{Kind: svcmodel.NodePort, Family: v4, Port: 30500},
				svcmodel.Frontend{Kind: svcmodel.LoadBalancer, Addr: lb, Family: v4, Port: 80}),
			port("fw", v6, ep(l.srvA6), []netip.Prefix{netip.MustParsePrefix("fd00:98::/120")},
				svcmodel.Frontend{Kind: svcmodel.ClusterIP, Addr: cip6, Family: v6, Port: 80},
				svcmodel.Frontend{Kind: svcmodel.NodePort, Family: v6, Port: 30500},
				svcmodel.Frontend{Kind: svcmodel.LoadBalancer, Addr: lb6, Family: v6, Port: 80}),
			port("open", v4, ep(l.srvA), nil, svcmodel.Frontend{Kind: svcmodel.LoadBalancer, Addr: open, Family: v4, Port: 80}),
			port("open", v6, ep(l.srvA6), nil, svcmodel.Frontend{Kind: svcmodel.LoadBalancer, Addr: open6, Family: v6, Port: 80}),
		},
	}
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(snap))
	t.Cleanup(func() { s.Delete() })

	for _, c := range []struct {
		family      string
		in, outside netip.Addr
		lb, open    netip.AddrPort
		np, cip     netip.AddrPort
		masq        netip.Addr
	}{
		{"IPv4", in, outside, netip.AddrPortFrom(lb, 80), netip.AddrPortFrom(open, 80), netip.AddrPortFrom(l.hostOut, 30500), netip.AddrPortFrom(cip, 80), l.masq},
		{"IPv6", in6, outside6, netip.AddrPortFrom(lb6, 80), netip.AddrPortFrom(open6, 80), netip.AddrPortFrom(l.hostOut6, 30500), netip.AddrPortFrom(cip6, 80), l.masq6},
	} {
		t.Run(c.family, func(t *testing.T) {
			for _, to := range []netip.AddrPort{c.np, c.cip, c.open} {
				if got, err := seenFromAddr(t, l.out.Path(), c.outside, to); err != nil || got != c.masq {
					t.Errorf("a client outside the ranges (%v) to %v, which they do not gate: seen from %v (%v), want %v", c.outside, to, got, err, c.masq)
				}
			}
			if got, err := seenFromAddr(t, l.out.Path(), c.in, c.lb); err != nil || got != c.masq {
				t.Errorf("a client inside the ranges (%v) to the load balancer's %v: seen from %v (%v), want %v", c.in, c.lb, got, err, c.masq)
			}
			if got, err := seenFromAddr(t, l.out.Path(), c.outside, c.lb); !dropped(err) {
				t.Errorf("a client outside the ranges (%v) to the load balancer's %v: seen from %v (%v), want the connection dropped", c.outside, c.lb, got, err)
			}
		})
	}
}

// TestServicesNodePortIPv6: IPv6 NodePorts are served on the node's
// NodePort addresses (Snapshot.NodePortAddrs: --nodeport-addresses
// resolved) and on no other address of the node; from off the node, a
// Cluster policy is masqueraded to the node, a Local policy keeps the
// client's address and uses only the local endpoint, and a node without a
// local endpoint of a Local policy drops the connection (kube-proxy: the
// load balancer's health check steers traffic away; a reject would reset
// a client the load balancer sent anyway), while a Service with no
// endpoint at all refuses it.
func TestServicesNodePortIPv6(t *testing.T) {
	l := newExtLab(t)
	other6 := netip.MustParseAddr("fd00:97::1") // the node's, on another interface: not a NodePort address
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(other6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, l.out.EnsureAddr("eth0", netip.MustParsePrefix("fd00:97::2/64"), netops.AddrOpts{NoDAD: true}))
	v6 := svcmodel.IPv6
	ep := func(ap netip.AddrPort, local bool) svcmodel.Endpoint {
		return svcmodel.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, Local: local}
	}
	a, b := ep(l.srvA6, true), ep(l.srvB6, false)
	port := func(name string, np uint16, cluster, local []svcmodel.Endpoint, extLocal bool) svcmodel.ServicePort {
		return svcmodel.ServicePort{Name: svcmodel.PortName{Namespace: "t", Name: name}, Family: v6, Protocol: svcmodel.TCP,
			Frontends:        []svcmodel.Frontend{{Kind: svcmodel.NodePort, Family: v6, Port: np}},
			ClusterEndpoints: cluster, LocalEndpoints: local, ExternalLocal: extLocal, HasEndpoints: len(cluster) > 0}
	}
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{l.hostOut6},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("fd00:99::/64")},
		Ports: []svcmodel.ServicePort{
			port("cluster", 30600, []svcmodel.Endpoint{b}, []svcmodel.Endpoint{}, false),
			port("elsewhere", 30602, []svcmodel.Endpoint{b}, nil, true),
			port("local", 30601, []svcmodel.Endpoint{a, b}, []svcmodel.Endpoint{a}, true),
			port("none", 30603, nil, nil, true),
		},
	}
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(snap))
	t.Cleanup(func() { s.Delete() })

	to := func(a netip.Addr, p uint16) netip.AddrPort { return netip.AddrPortFrom(a, p) }
	if got, err := seenFromAddr(t, l.out.Path(), l.cli6, to(l.hostOut6, 30600)); err != nil || got != l.masq6 {
		t.Errorf("IPv6 NodePort, policy Cluster: seen from %v (%v), want the node's %v (masqueraded)", got, err, l.masq6)
	}
	for range 6 { // (two endpoints in the cluster: only the local one serves)
		if got, err := seenFromAddr(t, l.out.Path(), l.cli6, to(l.hostOut6, 30601)); err != nil || got != l.cli6 {
			t.Fatalf("IPv6 NodePort, policy Local: seen from %v (%v), want the client's %v", got, err, l.cli6)
		}
	}
	if got, err := seenFromAddr(t, l.out.Path(), l.cli6, to(l.hostOut6, 30602)); !dropped(err) {
		t.Errorf("IPv6 NodePort, policy Local, no local endpoint: seen from %v (%v), want the connection dropped", got, err)
	}
	if _, err := seenFromAddr(t, l.out.Path(), l.cli6, to(l.hostOut6, 30603)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("IPv6 NodePort without endpoints: %v, want connection refused", err)
	}
	// Not a NodePort address: nothing listens there, the node refuses.
	if got, err := seenFromAddr(t, l.out.Path(), netip.MustParseAddr("fd00:97::2"), to(other6, 30600)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("IPv6 NodePort on %v, not a NodePort address: seen from %v (%v), want refused by the node (not served)", other6, got, err)
	}
	// Named later (the agent resolves --nodeport-addresses at each sync):
	// served there too.
	snap2 := *snap
	snap2.NodePortAddrs = []netip.Addr{other6, l.hostOut6}
	must(t, s.Apply(&snap2))
	if got, err := seenFromAddr(t, l.out.Path(), netip.MustParseAddr("fd00:97::2"), to(other6, 30600)); err != nil || got != l.masq6 {
		t.Errorf("IPv6 NodePort on %v once named: seen from %v (%v), want %v", other6, got, err, l.masq6)
	}
}
