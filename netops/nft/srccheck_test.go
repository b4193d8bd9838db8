package nft_test

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// dropWait is how long a test waits for what the check should keep away.
const dropWait = 1500 * time.Millisecond

// neighTakes reports whether h's neighbour entry for ip on dev holds mac
// within wait.
func neighTakes(t *testing.T, h *netops.Handle, dev string, ip netip.Addr, mac net.HardwareAddr, wait time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(wait); ; {
		ns, err := h.Neighs(dev)
		must(t, err)
		for _, n := range ns {
			if n.IP == ip && bytes.Equal(n.MAC, mac) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSourceCheckBridge: a pod on a checked bridge port sends from its own
// addresses only: datagrams from the bridge's address or another's are
// dropped at the bridge, and its gratuitous ARP and unsolicited neighbour
// advertisement for the gateway leave the other pod's neighbour entries
// alone. Without the check (deleted, twice) all of it gets through: the
// test sees a spoof when there is one.
func TestSourceCheckBridge(t *testing.T) {
	l := labtest.New(t, 2)
	attacker, victim := l.Pods[0], l.Pods[1]
	a4, a6 := labtest.PodAddrs(0)
	v4, v6 := labtest.PodAddrs(1)
	gw4, gw6 := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("fd00:99::1")
	br, err := l.Host.LinkByName("br0")
	must(t, err)
	am, err := attacker.LinkByName("eth0")
	must(t, err)
	vm, err := victim.LinkByName("eth0")
	must(t, err)
	// The attacker knows the victim's MAC: what it sends needs no ARP.
	must(t, attacker.EnsureNeigh("eth0", v4.Addr(), vm.MAC))
	must(t, attacker.EnsureNeigh("eth0", v6.Addr(), vm.MAC))
	// The victim has talked to its gateway: it has neighbour entries.
	for _, gw := range []netip.Addr{gw4, gw6} {
		must(t, nstest.Reachable(t, victim.Path(), l.Host.Path(), gw))
	}
	sink4, sink6 := nstest.ListenUDP(t, victim.Path(), v4.Addr()), nstest.ListenUDP(t, victim.Path(), v6.Addr())
	sink := func(a netip.Addr) *nstest.UDPSink {
		if a.Is4() {
			return sink4
		}
		return sink6
	}
	forged := []netip.Addr{gw4, netip.MustParseAddr("10.99.0.9"), gw6, netip.MustParseAddr("fd00:99::9")}

	h := l.Host.NFT()
	must(t, h.DeleteSourceCheck(nft.SrcCheckBridge, "veth0", nil)) // never made: fine
	must(t, h.EnsureSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{a4.Addr(), a6.Addr()}))
	must(t, h.EnsureSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{a4.Addr(), a6.Addr()}))
	if got, err := h.SourceCheckAddrs(nft.SrcCheckBridge, "veth0"); err != nil || !slices.Equal(got, []netip.Addr{a4.Addr(), a6.Addr(), nft.PodLinkLocal("veth0")}) {
		t.Errorf("SourceCheckAddrs = %v, %v", got, err)
	}
	if ports, err := h.SourceCheckPorts(nft.SrcCheckBridge); err != nil || !slices.Equal(ports, []string{"veth0"}) {
		t.Errorf("SourceCheckPorts = %v, %v", ports, err)
	}
	for _, own := range []netip.Addr{a4.Addr(), a6.Addr()} {
		if !nstest.SendFrom(t, attacker.Path(), own, sink(own), 10*time.Second) {
			t.Errorf("the pod's datagram from its own %s did not arrive", own)
		}
	}
	for _, src := range forged {
		if nstest.SendFrom(t, attacker.Path(), src, sink(src), dropWait) {
			t.Errorf("a datagram from %s (not the pod's) got through the checked port", src)
		}
	}
	must(t, nstest.SendGratuitousARP(t, attacker.Path(), "eth0", gw4))
	must(t, nstest.SendUnsolicitedNA(t, attacker.Path(), "eth0", a6.Addr(), gw6))
	for _, gw := range []netip.Addr{gw4, gw6} {
		if neighTakes(t, victim, "eth0", gw, am.MAC, dropWait) {
			t.Errorf("the victim's neighbour entry for %s took the attacker's MAC", gw)
		}
		if !neighTakes(t, victim, "eth0", gw, br.MAC, 0) {
			t.Errorf("the victim's neighbour entry for %s lost the bridge's MAC", gw)
		}
	}

	must(t, h.DeleteSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{a4.Addr(), a6.Addr()}))
	must(t, h.DeleteSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{a4.Addr(), a6.Addr()}))
	if got, err := h.SourceCheckAddrs(nft.SrcCheckBridge, "veth0"); err != nil || len(got) != 0 {
		t.Errorf("SourceCheckAddrs after the delete = %v, %v", got, err)
	}
	for _, src := range forged {
		if !nstest.SendFrom(t, attacker.Path(), src, sink(src), 10*time.Second) {
			t.Errorf("unchecked, a datagram from %s did not arrive", src)
		}
	}
	must(t, nstest.SendGratuitousARP(t, attacker.Path(), "eth0", gw4))
	must(t, nstest.SendUnsolicitedNA(t, attacker.Path(), "eth0", a6.Addr(), gw6))
	for _, gw := range []netip.Addr{gw4, gw6} {
		if !neighTakes(t, victim, "eth0", gw, am.MAC, 10*time.Second) {
			t.Errorf("unchecked, the victim's neighbour entry for %s did not take the attacker's MAC", gw)
		}
	}
}

// TestSourceCheckSweep: a delete that does not know the port's addresses
// (nil) finds them in the sets; other ports keep theirs.
func TestSourceCheckSweep(t *testing.T) { labtest.OnNFT(t, "src", testSourceCheckSweep) }

func testSourceCheckSweep(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	a, b := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00:1::2")
	must(t, h.EnsureSourceCheck(nft.SrcCheckRouted, "cbxa", []netip.Addr{a, b}))
	must(t, h.EnsureSourceCheck(nft.SrcCheckRouted, "cbxb", []netip.Addr{a.Next()}))
	must(t, h.DeleteSourceCheck(nft.SrcCheckRouted, "cbxa", nil))
	if ports, err := h.SourceCheckPorts(nft.SrcCheckRouted); err != nil || !slices.Equal(ports, []string{"cbxb"}) {
		t.Errorf("ports after the sweep = %v, %v", ports, err)
	}
	if got, _ := h.SourceCheckAddrs(nft.SrcCheckRouted, "cbxa"); len(got) != 0 {
		t.Errorf("cbxa keeps %v", got)
	}
	if got, _ := h.SourceCheckAddrs(nft.SrcCheckRouted, "cbxb"); !slices.Equal(got, []netip.Addr{a.Next()}) {
		t.Errorf("cbxb has %v", got)
	}
}
