package nft_test

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// udpAsk sends a datagram from the namespace at nsPath to ap and waits 2 s
// for the answer: its text, or why none came (a reject's ICMP port
// unreachable: connection refused; a drop: a timeout).
func udpAsk(t *testing.T, nsPath string, ap netip.AddrPort) (string, error) {
	t.Helper()
	var out string
	err := nstest.Run(t, nsPath, func() error {
		c, err := net.Dial("udp", ap.String())
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("?")); err != nil {
			return err
		}
		if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
			return err
		}
		b := make([]byte, 64)
		n, err := c.Read(b)
		out = string(b[:n])
		return err
	})
	return out, err
}

// TestServicesServiceRange: the node's default route leads to an
// "upstream" namespace that holds a ClusterIP and an unallocated address
// of the Service range itself, with servers on them (what a packet routed
// out as is would reach). A pod's new connection to the ClusterIP on a
// port no Service has is rejected (TCP: refused; UDP: port unreachable),
// also from the node; to the unallocated address dropped (a timeout);
// the Service's own port and a NodePort still serve; both families. Each
// reaches upstream without the check.
func TestServicesServiceRange(t *testing.T) {
	l := newExtLab(t)
	must(t, l.Host.EnsureRoute(netops.Route{GW: l.cli, Dev: "vout"}))
	must(t, l.Host.EnsureRoute(netops.Route{GW: l.cli6, Dev: "vout"}))
	// (the node's ICMP redirects to pod b, its answers on the bridge it
	// came from, would use up the per-host ICMP rate limit that the port
	// unreachable errors are counted against too)
	must(t, l.Host.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.icmp_ratelimit", Value: "0"},
		netops.SysctlSetting{Key: "net.ipv6.icmp.ratelimit", Value: "0"}))
	_, b6 := labtest.PodAddrs(1)
	b4, _ := labtest.PodAddrs(1)
	cip4, free4 := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.99")
	cip6, free6 := netip.MustParseAddr("fd96::10"), netip.MustParseAddr("fd96::99")
	type fam struct {
		name           string
		cip, free, pod netip.Addr
		srv            netip.AddrPort
		np             netip.Addr
		cli            netip.Addr
	}
	fams := []fam{{"IPv4", cip4, free4, b4.Addr(), l.srvA, l.hostOut, l.cli}, {"IPv6", cip6, free6, b6.Addr(), l.srvA6, l.hostOut6, l.cli6}}
	up := map[netip.Addr]netip.AddrPort{} // upstream's servers
	for _, f := range fams {
		for _, a := range []netip.Addr{f.cip, f.free} {
			must(t, l.out.EnsureAddr("eth0", netip.PrefixFrom(a, a.BitLen()), netops.AddrOpts{NoDAD: true}))
			up[a] = nstest.Serve(t, l.out.Path(), a)
		}
		udpWho(t, l.out.Path(), netip.AddrPortFrom(f.cip, 5353))
	}
	var ports []svcmodel.ServicePort
	for _, f := range fams {
		fm := svcmodel.FamilyOf(f.cip)
		ports = append(ports, svcmodel.ServicePort{Name: svcmodel.PortName{Namespace: "t", Name: "web"}, Family: fm, Protocol: svcmodel.TCP,
			Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: f.cip, Family: fm, Port: 80},
				{Kind: svcmodel.NodePort, Family: fm, Port: 30080}},
			ClusterEndpoints: []svcmodel.Endpoint{{Addr: f.srv.Addr(), Port: f.srv.Port(), Ready: true, Serving: true, Local: true}}, HasEndpoints: true})
	}
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{l.hostOut, l.hostOut6},
		// (pod b, the client, is not in them: masqueraded, so that pod a's
		// answers come back through the node, the lab having no
		// br_netfilter)
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.2/32"), netip.MustParsePrefix("fd00:99::2/128")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd96::/112")},
		Ports:        ports,
	}
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(snap))
	t.Cleanup(func() { s.Delete() })

	pod := l.Pods[1].Path()
	for _, f := range fams {
		if _, err := seenFromAddr(t, pod, f.pod, netip.AddrPortFrom(f.cip, 80)); err != nil {
			t.Errorf("%s: the Service's port: %v, want served", f.name, err)
		}
		if _, err := seenFromAddr(t, l.out.Path(), f.cli, netip.AddrPortFrom(f.np, 30080)); err != nil {
			t.Errorf("%s: the NodePort: %v, want served", f.name, err)
		}
		unused := up[f.cip]
		if got, err := seenFromAddr(t, pod, f.pod, unused); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: a pod to the ClusterIP's unused port %v: seen from %v (%v), want refused (not routed upstream)", f.name, unused, got, err)
		}
		if err := dial(t, l.Host.Path(), unused); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: the node to the ClusterIP's unused port %v: %v, want refused", f.name, unused, err)
		}
		if got, err := udpAsk(t, pod, netip.AddrPortFrom(f.cip, 5353)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: UDP to the ClusterIP's unused port: answered %q (%v), want port unreachable", f.name, got, err)
		}
		if got, err := seenFromAddr(t, pod, f.pod, up[f.free]); !dropped(err) {
			t.Errorf("%s: a pod to the unallocated %v: seen from %v (%v), want dropped", f.name, up[f.free], got, err)
		}
	}
	// The Service goes: its ClusterIP is an unallocated address now.
	next := *snap
	next.Ports = nil
	must(t, s.Apply(&next))
	if got, err := seenFromAddr(t, pod, b4.Addr(), up[cip4]); !dropped(err) {
		t.Errorf("the deleted Service's ClusterIP: seen from %v (%v), want dropped", got, err)
	}
}
