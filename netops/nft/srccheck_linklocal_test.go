package nft_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestSourceCheckLinkLocal: a checked dual-stack pod (its link-local
// address PodLinkLocal of its port, as the bridge role makes it) uses
// link-local for neighbour discovery only: another pod resolves its
// link-local address, not one it invents; no datagram from or to a
// link-local address leaves it, from its own, another pod's or an
// invented one, to a pod's global or link-local address. Its datagrams
// from its global address still arrive. Without the check (deleted) a
// link-local datagram and the invented address's resolution get through:
// the test sees what it should stop. (Before issue 60 the check returned
// on any link-local source.)
func TestSourceCheckLinkLocal(t *testing.T) {
	l := labtest.New(t, 2)
	attacker, victim := l.Pods[0], l.Pods[1]
	a4, a6 := labtest.PodAddrs(0)
	_, v6 := labtest.PodAddrs(1)
	own, victimLL := nft.PodLinkLocal("veth0"), nft.PodLinkLocal("veth1")
	invented := netip.MustParseAddr("fe80::bad")
	am, err := attacker.LinkByName("eth0")
	must(t, err)
	vm, err := victim.LinkByName("eth0")
	must(t, err)
	if got, err := attacker.AllAddrs("eth0"); err != nil || !hasAddr(got, own) {
		t.Fatalf("the attacker's eth0 has %v (%v), not its link-local address %s", got, err, own)
	}
	// What the attacker sends needs no neighbour discovery; the invented
	// address is its own too, as a pod with CAP_NET_ADMIN may add it.
	for _, ip := range []netip.Addr{victimLL, v6.Addr()} {
		must(t, attacker.EnsureNeigh("eth0", ip, vm.MAC))
	}
	must(t, attacker.EnsureAddr("eth0", netip.PrefixFrom(invented, 64), netops.AddrOpts{NoDAD: true}))

	h := l.Host.NFT()
	must(t, h.EnsureSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{a4.Addr(), a6.Addr()}))
	sink := nstest.ListenUDP(t, victim.Path(), netip.IPv6Unspecified())
	if !nstest.SendFromTo(t, attacker.Path(), "eth0", a6.Addr(), v6.Addr(), sink, 10*time.Second) {
		t.Error("the pod's datagram from its own global address did not arrive")
	}
	for _, c := range []struct{ src, dst netip.Addr }{
		{own, victimLL}, {own, v6.Addr()}, {a6.Addr(), victimLL}, {victimLL, victimLL}, {invented, v6.Addr()},
	} {
		if nstest.SendFromTo(t, attacker.Path(), "eth0", c.src, c.dst, sink, dropWait) {
			t.Errorf("a datagram from %s to %s got through the checked port", c.src, c.dst)
		}
	}
	// Neighbour discovery: the victim resolves the attacker's own
	// link-local address (its advertisement passes), not the invented one.
	resolves := func(ip netip.Addr, wait time.Duration) bool {
		t.Helper()
		probe := nstest.ListenUDP(t, attacker.Path(), netip.IPv6Unspecified())
		nstest.SendFromTo(t, victim.Path(), "eth0", victimLL, ip, probe, 200*time.Millisecond)
		return neighTakes(t, victim, "eth0", ip, am.MAC, wait)
	}
	if !resolves(own, 10*time.Second) {
		t.Errorf("the victim did not resolve the attacker's own link-local address %s", own)
	}
	if resolves(invented, dropWait) {
		t.Errorf("the victim resolved %s, an address the attacker invented, to its MAC", invented)
	}

	must(t, h.DeleteSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{a4.Addr(), a6.Addr()}))
	if got, _ := h.SourceCheckAddrs(nft.SrcCheckBridge, "veth0"); len(got) != 0 {
		t.Errorf("the port keeps %v after its delete", got)
	}
	if !nstest.SendFromTo(t, attacker.Path(), "eth0", own, victimLL, sink, 10*time.Second) {
		t.Error("unchecked, a link-local datagram did not arrive")
	}
	if !resolves(invented, 10*time.Second) {
		t.Errorf("unchecked, the victim did not resolve %s", invented)
	}
}

// hasAddr reports whether ps holds a.
func hasAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Addr() == a {
			return true
		}
	}
	return false
}
