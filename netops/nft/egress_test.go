package nft_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// egressLab is a node (labtest's host, its pods on br0 in 10.99.0.0/24 of
// the cluster network 10.99.0.0/16, the overlay's masquerade in place)
// with an uplink up0 (192.0.2.1/24) to a server namespace that answers at
// 192.0.2.100 and 192.0.2.101 (outside) and at 10.99.9.9 (a cluster
// address: a remote node's pod, routed by the node through the server),
// and routes the pods' subnet back, so that an unNATed connection works
// and shows its source.
type egressLab struct {
	*labtest.Lab
	out, out2, cluster netip.AddrPort // the servers
}

const egressUplink = "up0"

var (
	egressNodeAddr = netip.MustParseAddr("192.0.2.1")
	egressIP       = netip.MustParseAddr("192.0.2.10")
	egressCluster  = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16"), netip.MustParsePrefix("10.200.0.0/16")}
)

func newEgressLab(t *testing.T) *egressLab {
	t.Helper()
	l := labtest.New(t, 2)
	server := openNS(t, "egs")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: egressUplink, PeerName: "eth0", Peer: server})
	must(t, err)
	must(t, l.Host.EnsureAddr(egressUplink, netip.PrefixFrom(egressNodeAddr, 24), netops.AddrOpts{}))
	for _, p := range []string{"192.0.2.100/24", "192.0.2.101/24", "10.99.9.9/32"} {
		must(t, server.EnsureAddr("eth0", netip.MustParsePrefix(p), netops.AddrOpts{}))
	}
	must(t, server.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), GW: egressNodeAddr, Dev: "eth0"}))
	must(t, l.Host.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.9.0/24"), GW: netip.MustParseAddr("192.0.2.100"), Dev: egressUplink}))
	must(t, l.Host.SetSysctl("net.ipv4.ip_forward", "1"))
	// cnibox-overlay's masquerade, at srcnat: pods to the outside leave
	// as the node.
	_, err = l.Host.NFT().EnsureOverlayMasq([]nft.OverlayMasqNet{{Network: egressCluster[0], Subnet: netip.MustParsePrefix("10.99.0.0/24")}}, nft.OverlayMasqOpts{})
	must(t, err)
	return &egressLab{
		Lab:     l,
		out:     nstest.Serve(t, server.Path(), netip.MustParseAddr("192.0.2.100")),
		out2:    nstest.Serve(t, server.Path(), netip.MustParseAddr("192.0.2.101")),
		cluster: nstest.Serve(t, server.Path(), netip.MustParseAddr("10.99.9.9")),
	}
}

// seen is the source address the server at srv sees a connection from
// pod i come from.
func (l *egressLab) seen(t *testing.T, i int, srv netip.AddrPort) netip.Addr {
	t.Helper()
	return nstest.SeenFrom(t, l.Pods[i].Path(), srv)
}

func podAddr(i int) netip.Addr {
	v4, _ := labtest.PodAddrs(i)
	return v4.Addr()
}

// TestEgressTraffic: real connections through a node with the egress
// table and the overlay's masquerade. A held gateway SNATs its sources to
// the egress IP on the uplink; one held elsewhere keeps the pod's address
// although the overlay's masquerade (another table, at srcnat) would
// rewrite it: the identity SNAT's binding, made first at srcnat - 10, is
// the one the connection keeps. Cluster destinations are untouched,
// Destinations restrict a rule, unselected pods are masqueraded as before.
func TestEgressTraffic(t *testing.T) {
	t.Parallel()
	l := newEgressLab(t)
	// The held address is on the uplink (as the agent puts it there, with
	// a lifetime), for the replies.
	must(t, l.Host.EnsureAddr(egressUplink, netip.PrefixFrom(egressIP, 32), netops.AddrOpts{}))
	pod0, pod1 := podAddr(0), podAddr(1)
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
			{0, l.out, egressIP}, {0, l.out2, egressIP},
			{1, l.out, egressNodeAddr}, // not selected: the overlay's masquerade
			{0, l.cluster, pod0},       // a cluster destination: untouched
		}},
		{"held, destinations", nft.EgressRule{Held: true, Sources: []netip.Addr{pod0}, Destinations: []netip.Prefix{netip.MustParsePrefix("192.0.2.100/32")}}, []seen{
			{0, l.out, egressIP}, {0, l.out2, egressNodeAddr}, {1, l.out, egressNodeAddr},
		}},
		{"not held", nft.EgressRule{Sources: []netip.Addr{pod0}}, []seen{
			{0, l.out, pod0}, // kept for the holder, the masquerade skipped
			{1, l.out, egressNodeAddr}, {0, l.cluster, pod0},
		}},
		// Via: kept only for the packets routed to the holder (here
		// the servers are on the uplink's link: a packet's next hop is
		// its destination).
		{"not held, via", nft.EgressRule{Sources: []netip.Addr{pod0}, Via: l.out.Addr()}, []seen{
			{0, l.out, pod0}, {0, l.out2, egressNodeAddr},
		}},
		{"not held, no route via the holder", nft.EgressRule{Sources: []netip.Addr{pod0}, Via: netip.MustParseAddr("192.0.2.254")}, []seen{
			{0, l.out, egressNodeAddr},
		}},
		{"not held, destinations", nft.EgressRule{Sources: []netip.Addr{pod0, pod1}, Destinations: []netip.Prefix{netip.MustParsePrefix("192.0.2.101/32")}}, []seen{
			{0, l.out, egressNodeAddr}, {0, l.out2, pod0}, {1, l.out2, pod1},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.rule.Name, tt.rule.EgressIP = "gateway prod/"+egressIP.String(), egressIP
			changed, err := l.Host.NFT().EnsureEgress(nft.EgressSpec{Cluster: egressCluster, Uplink: egressUplink, Rules: []nft.EgressRule{tt.rule}})
			if err != nil || !changed {
				t.Fatalf("EnsureEgress = %t, %v; want changed", changed, err)
			}
			for _, s := range tt.seens {
				if got := l.seen(t, s.pod, s.srv); got != s.want {
					t.Errorf("pod %d to %v seen as %v, want %v", s.pod, s.srv.Addr(), got, s.want)
				}
			}
		})
	}
	must(t, l.Host.NFT().DeleteEgress())
	if got := l.seen(t, 0, l.out); got != egressNodeAddr {
		t.Errorf("after DeleteEgress pod 0 seen as %v, want %v (masqueraded)", got, egressNodeAddr)
	}
}

// TestEnsureEgress: a second EnsureEgress changes nothing; a rule or a
// set element deleted under it, or the table, is put back; a changed spec
// rewrites it; EgressRules lists the comments; an empty spec and
// DeleteEgress (twice) remove it.
func TestEnsureEgress(t *testing.T) {
	t.Parallel()
	h := openNS(t, "ege")
	c := nftIn(t, h)
	spec := nft.EgressSpec{Cluster: egressCluster, Uplink: "eth0", Rules: []nft.EgressRule{
		{Name: "a", EgressIP: egressIP, Held: true, Sources: []netip.Addr{podAddr(0), podAddr(1), podAddr(0)}},
		{Name: "b", EgressIP: netip.MustParseAddr("192.0.2.11"), Sources: []netip.Addr{podAddr(2)}, Via: netip.MustParseAddr("10.244.2.0"), Destinations: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("198.51.100.128/25")}},
	}}
	ensure := func(step string, want bool) {
		t.Helper()
		changed, err := h.NFT().EnsureEgress(spec)
		if err != nil || changed != want {
			t.Fatalf("%s: EnsureEgress = %t, %v; want %t", step, changed, err, want)
		}
	}
	ensure("first", true)
	ensure("second", false)
	rules, err := h.NFT().EgressRules()
	must(t, err)
	want := []string{
		"cnibox egress: to @cluster: return",
		"cnibox egress a: held: from @src-0 out eth0: snat to 192.0.2.10",
		"cnibox egress b: to the holder of 192.0.2.11: from @src-1 to @dst-1 via 10.244.2.0: keep the source (snat to ip saddr)",
	}
	if !slices.Equal(rules, want) {
		t.Errorf("EgressRules = %q, want %q", rules, want)
	}

	table := &nftables.Table{Name: nft.EgressTable, Family: nftables.TableFamilyIPv4}
	chain := &nftables.Chain{Name: "postrouting", Table: table}
	have, err := c.GetRules(table, chain)
	must(t, err)
	must(t, c.DelRule(have[1]))
	must(t, c.Flush())
	ensure("after a rule's delete", true)
	if rules, _ := h.NFT().EgressRules(); !slices.Equal(rules, want) {
		t.Errorf("EgressRules after the repair = %q, want %q", rules, want)
	}
	set, err := c.GetSetByName(table, "src-0")
	must(t, err)
	must(t, c.SetDeleteElements(set, []nftables.SetElement{{Key: podAddr(1).AsSlice()}}))
	must(t, c.Flush())
	ensure("after an element's delete", true)
	ensure("repaired", false)

	spec.Rules[1].Held = true
	ensure("changed", true)
	ensure("changed, again", false)
	must(t, h.NFT().DeleteEgress())
	ensure("after DeleteEgress", true)

	spec.Rules = nil
	ensure("no rules", true)
	ensure("no rules, again", false)
	for range 2 {
		must(t, h.NFT().DeleteEgress())
	}
	if rules, err := h.NFT().EgressRules(); err != nil || rules != nil {
		t.Errorf("EgressRules without the table = %q, %v; want nil", rules, err)
	}
}

// TestEgressFamily: a rule's sources, destinations and next hop are of its
// egress IP's family, or the error names the address, before the kernel
// is asked.
func TestEgressFamily(t *testing.T) {
	t.Parallel()
	h, err := nft.Open("")
	must(t, err)
	defer h.Close()
	ip6 := netip.MustParseAddr("2001:db8::10")
	for _, s := range []nft.EgressSpec{
		{Rules: []nft.EgressRule{{Name: "a", EgressIP: ip6, Sources: []netip.Addr{podAddr(0)}}}},
		{Rules: []nft.EgressRule{{Name: "a", EgressIP: egressIP, Sources: []netip.Addr{ip6}}}},
		{Rules: []nft.EgressRule{{Name: "a", EgressIP: egressIP, Destinations: []netip.Prefix{netip.PrefixFrom(ip6, 64)}}}},
		{Rules: []nft.EgressRule{{Name: "a", EgressIP: ip6, Via: egressIP}}},
	} {
		_, err := h.EnsureEgress(s)
		if !errors.Is(err, nft.ErrEgressFamily) {
			t.Errorf("EnsureEgress(%+v) = %v; want an error wrapping ErrEgressFamily", s, err)
		}
	}
	if _, err := h.EnsureEgress(nft.EgressSpec{Rules: []nft.EgressRule{{Name: "a", EgressIP: egressIP, Held: true}}}); err == nil || !strings.Contains(err.Error(), "uplink") {
		t.Errorf("a held rule without an uplink: %v; want an error about the uplink", err)
	}
}
