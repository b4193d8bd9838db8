package nft_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The IPv6 egress lab: the node's pods on br0 in fd00:99::/64 of the
// cluster network fd00:99::/48 (the overlay's masquerade in place), an
// uplink up0 (2001:db8:e6::1/64) to a server namespace answering at
// 2001:db8:e6::100 and ::101, which routes the pods' subnet back.
var (
	egress6NodeAddr = netip.MustParseAddr("2001:db8:e6::1")
	egress6IP       = netip.MustParseAddr("2001:db8:e6::10")
	egress6Cluster  = []netip.Prefix{netip.MustParsePrefix("fd00:99::/48"), netip.MustParsePrefix("10.99.0.0/16")}
)

func podAddr6(i int) netip.Addr {
	_, v6 := labtest.PodAddrs(i)
	return v6.Addr()
}

// TestEgressTraffic6: TestEgressTraffic's cases over IPv6, beside an IPv4
// rule in the same spec (each family its table): a held IPv6 gateway
// SNATs its sources to the IPv6 egress IP on the uplink, one held
// elsewhere keeps the pod's address (the overlay's IPv6 masquerade would
// rewrite it) for the packets routed via the holder only.
func TestEgressTraffic6(t *testing.T) {
	t.Parallel()
	l := labtest.New(t, 2)
	server := openNS(t, "egs6")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: egressUplink, PeerName: "eth0", Peer: server})
	must(t, err)
	must(t, l.Host.EnsureAddr(egressUplink, netip.PrefixFrom(egress6NodeAddr, 64), netops.AddrOpts{NoDAD: true}))
	// As the agent holds it (agent/addrhold): with a lifetime, and
	// deprecated, so that the masquerade keeps choosing the node's own
	// address.
	must(t, l.Host.EnsureAddrLifetime(egressUplink, netip.PrefixFrom(egress6IP, 128), time.Minute))
	for _, p := range []string{"2001:db8:e6::100/64", "2001:db8:e6::101/64"} {
		must(t, server.EnsureAddr("eth0", netip.MustParsePrefix(p), netops.AddrOpts{NoDAD: true}))
	}
	must(t, server.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("fd00:99::/64"), GW: egress6NodeAddr, Dev: "eth0"}))
	must(t, l.Host.SetSysctl("net.ipv6.conf.all.forwarding", "1"))
	_, err = l.Host.NFT().EnsureOverlayMasq([]nft.OverlayMasqNet{{Network: egress6Cluster[0], Subnet: netip.MustParsePrefix("fd00:99::/64")}}, nft.OverlayMasqOpts{})
	must(t, err)
	out := nstest.Serve(t, server.Path(), netip.MustParseAddr("2001:db8:e6::100"))
	out2 := nstest.Serve(t, server.Path(), netip.MustParseAddr("2001:db8:e6::101"))
	pod0 := podAddr6(0)
	type seen struct {
		pod  int
		srv  netip.AddrPort
		want netip.Addr
	}
	for _, tt := range []struct {
		name  string
		rule  nft.EgressRule
		seens []seen
	}{
		{"held", nft.EgressRule{Held: true, Sources: []netip.Addr{pod0}}, []seen{
			{0, out, egress6IP}, {0, out2, egress6IP}, {1, out, egress6NodeAddr},
		}},
		{"held, destinations", nft.EgressRule{Held: true, Sources: []netip.Addr{pod0}, Destinations: []netip.Prefix{netip.MustParsePrefix("2001:db8:e6::100/128")}}, []seen{
			{0, out, egress6IP}, {0, out2, egress6NodeAddr},
		}},
		{"not held", nft.EgressRule{Sources: []netip.Addr{pod0}}, []seen{
			{0, out, pod0}, {1, out, egress6NodeAddr},
		}},
		{"not held, via", nft.EgressRule{Sources: []netip.Addr{pod0}, Via: out.Addr()}, []seen{
			{0, out, pod0}, {0, out2, egress6NodeAddr},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.rule.Name, tt.rule.EgressIP = "gateway prod/"+egress6IP.String(), egress6IP
			v4 := nft.EgressRule{Name: "gateway v4/" + egressIP.String(), EgressIP: egressIP, Sources: []netip.Addr{podAddr(1)}}
			changed, err := l.Host.NFT().EnsureEgress(nft.EgressSpec{Cluster: egress6Cluster, Uplink: egressUplink, Rules: []nft.EgressRule{v4, tt.rule}})
			if err != nil || !changed {
				t.Fatalf("EnsureEgress = %t, %v; want changed", changed, err)
			}
			for _, s := range tt.seens {
				if got := nstest.SeenFrom(t, l.Pods[s.pod].Path(), s.srv); got != s.want {
					t.Errorf("pod %d to %v seen as %v, want %v", s.pod, s.srv.Addr(), got, s.want)
				}
			}
			rules, err := l.Host.NFT().EgressRules()
			must(t, err)
			if !slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, egress6IP.String()) }) ||
				!slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, egressIP.String()) }) {
				t.Errorf("EgressRules = %q; want the rules of both families", rules)
			}
		})
	}
	must(t, l.Host.NFT().DeleteEgress())
	if got := nstest.SeenFrom(t, l.Pods[0].Path(), out); got != egress6NodeAddr {
		t.Errorf("after DeleteEgress pod 0 seen as %v, want %v (masqueraded)", got, egress6NodeAddr)
	}
	if rules, err := l.Host.NFT().EgressRules(); err != nil || rules != nil {
		t.Errorf("EgressRules after DeleteEgress = %q, %v; want nil", rules, err)
	}
}
