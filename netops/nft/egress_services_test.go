package nft_test

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestEgressServices: a pod that an egress gateway selects reaches a
// ClusterIP (issue 63): the services table's DNAT (prerouting, dstnat)
// comes before the egress routes' lookup and the egress table's SNAT
// (postrouting, srcnat - 10), so both see the backend, a cluster address,
// and leave the connection alone: the backend, on this node or routed to
// another, sees the pod's own address, not the egress IP nor the node's,
// whether this node holds the gateway (SNAT) or another does (the pod's
// traffic routed to the holder by its rule, and kept unmasqueraded). A
// Service whose endpoint is outside the cluster networks is traffic to
// that address: it leaves through the gateway as any (docs/egress.md).
func TestEgressServices(t *testing.T) {
	t.Parallel()
	l := newEgressLab(t)
	// Pods of one bridge reach each other's Service through the node:
	// br_netfilter runs the bridged answers through conntrack, as on a
	// kubelet node.
	if err := l.Host.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"}); err != nil {
		t.Skipf("no br_netfilter (%v)", err)
	}
	must(t, l.Host.EnsureAddr(egressUplink, netip.PrefixFrom(egressIP, 32), netops.AddrOpts{}))
	pod0, pod1 := podAddr(0), podAddr(1)
	local := nstest.Serve(t, l.Pods[1].Path(), pod1)
	v4 := svcmodel.IPv4
	local4, remote4, outside4 := netip.MustParseAddr("10.200.0.10"), netip.MustParseAddr("10.200.0.11"), netip.MustParseAddr("10.200.0.12")
	sp := func(name string, cip netip.Addr, ep netip.AddrPort) svcmodel.ServicePort {
		return svcmodel.ServicePort{Name: svcmodel.PortName{Namespace: "t", Name: name}, Family: v4, Protocol: svcmodel.TCP,
			Frontends:        []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: cip, Family: v4, Port: 80}},
			ClusterEndpoints: []svcmodel.Endpoint{{Addr: ep.Addr(), Port: ep.Port(), Ready: true, Serving: true}}, HasEndpoints: true}
	}
	s := nft.NewServices(l.Host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(&svcmodel.Snapshot{ClusterCIDRs: egressCluster[:1],
		Ports: []svcmodel.ServicePort{sp("local", local4, local), sp("remote", remote4, l.cluster), sp("outside", outside4, l.out)}}))
	t.Cleanup(func() { s.Delete() })
	at := func(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, 80) }

	for _, tt := range []struct {
		name   string
		rule   nft.EgressRule
		routed bool // pod0's rule routes it to the holder (192.0.2.100)
		// what the outside Service's endpoint sees
		outside netip.Addr
	}{
		{"held here", nft.EgressRule{Held: true, Sources: []netip.Addr{pod0}}, false, egressIP},
		{"held elsewhere", nft.EgressRule{Sources: []netip.Addr{pod0}, Via: l.out.Addr()}, true, pod0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.rule.Name, tt.rule.EgressIP = "gateway prod/"+egressIP.String(), egressIP
			_, err := l.Host.NFT().EnsureEgress(nft.EgressSpec{Cluster: append(egressCluster, netip.MustParsePrefix("10.200.0.0/16")),
				Uplink: egressUplink, Rules: []nft.EgressRule{tt.rule}})
			must(t, err)
			var routes []netops.EgressRoute
			if tt.routed {
				routes = []netops.EgressRoute{{Table: netops.EgressTableFirst, Via: l.out.Addr(), Dev: egressUplink,
					Throw: egressCluster, Sources: []netip.Addr{pod0}}}
			}
			must(t, l.Host.SyncEgressRoutes(routes))
			// The gateway is in force: pod0's own traffic out leaves from it.
			if got := l.seen(t, 0, l.out2); got != tt.outside {
				t.Fatalf("pod 0 to %v seen as %v, want %v: the gateway is not in force", l.out2.Addr(), got, tt.outside)
			}
			for _, c := range []struct {
				what string
				to   netip.Addr
				want netip.Addr
			}{
				{"a ClusterIP of a backend on this node", local4, pod0},
				{"a ClusterIP of a backend on another node", remote4, pod0},
				{"a ClusterIP of an endpoint outside the cluster", outside4, tt.outside},
			} {
				if got := l.seen(t, 0, at(c.to)); got != c.want {
					t.Errorf("pod 0 through %s (%v) seen as %v, want %v", c.what, c.to, got, c.want)
				}
			}
		})
	}
	must(t, l.Host.SyncEgressRoutes(nil))
}
