package nft_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
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
