package nft_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestUnhookPod: a pod's DEL takes its masquerade entries and its port's
// source address check out in one call, for either kind of port, and
// leaves other pods' alone; a second DEL, or one for a pod that never had
// them, finds nothing and fails nothing; when the addresses are not known
// (or not the port's), the port's elements are found in the sets.
func TestUnhookPod(t *testing.T) {
	t.Parallel()
	labtest.OnNFT(t, "unh", testUnhookPod)
}

func testUnhookPod(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	a4, a6 := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00:1::2")
	b4 := netip.MustParseAddr("10.1.0.3")
	pods := []netip.Prefix{netip.PrefixFrom(a4, 24), netip.PrefixFrom(a6, 64), netip.PrefixFrom(b4, 24)}
	must(t, h.EnsureMasq("n", pods))
	for _, kind := range []nft.SrcCheckKind{nft.SrcCheckBridge, nft.SrcCheckRouted} {
		must(t, h.EnsureSourceCheck(kind, "cbxa", []netip.Addr{a4, a6}))
		must(t, h.EnsureSourceCheck(kind, "cbxb", []netip.Addr{b4}))
	}
	hasMasq := func(ip netip.Addr) bool {
		ok, err := h.HasMasq(ip)
		must(t, err)
		return ok
	}
	for _, kind := range []nft.SrcCheckKind{nft.SrcCheckBridge, nft.SrcCheckRouted} {
		u := nft.PodUnhook{IPs: []netip.Addr{a4, a6}, Masq: kind == nft.SrcCheckBridge, CheckedPort: "cbxa", CheckKind: kind}
		must(t, h.UnhookPod(u))
		must(t, h.UnhookPod(u)) // again: already gone
		if ports, err := h.SourceCheckPorts(kind); err != nil || !slices.Equal(ports, []string{"cbxb"}) {
			t.Errorf("kind %d: ports after the DEL = %v, %v; want cbxb alone", kind, ports, err)
		}
		if got, _ := h.SourceCheckAddrs(kind, "cbxa"); len(got) != 0 {
			t.Errorf("kind %d: cbxa keeps %v", kind, got)
		}
		if got, _ := h.SourceCheckAddrs(kind, "cbxb"); !slices.Equal(got, []netip.Addr{b4}) {
			t.Errorf("kind %d: cbxb has %v, want %v", kind, got, b4)
		}
	}
	if hasMasq(a4) || hasMasq(a6) {
		t.Error("the pod's masquerade entries are still there")
	}
	if !hasMasq(b4) {
		t.Error("the other pod lost its masquerade entry")
	}

	// Addresses that are not the port's: its elements are swept, the
	// other addresses' masquerade entries stay (Masq off).
	c4 := netip.MustParseAddr("10.1.0.9")
	must(t, h.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{c4}, CheckedPort: "cbxb", CheckKind: nft.SrcCheckBridge}))
	must(t, h.UnhookPod(nft.PodUnhook{CheckedPort: "cbxb", CheckKind: nft.SrcCheckRouted}))
	for _, kind := range []nft.SrcCheckKind{nft.SrcCheckBridge, nft.SrcCheckRouted} {
		if ports, err := h.SourceCheckPorts(kind); err != nil || len(ports) != 0 {
			t.Errorf("kind %d: ports after the sweeps = %v, %v", kind, ports, err)
		}
	}
	if !hasMasq(b4) {
		t.Error("a DEL without Masq took a masquerade entry")
	}

	// A namespace without any of the tables: nothing to do, no error.
	must(t, k.Another("unh2").UnhookPod(nft.PodUnhook{IPs: []netip.Addr{a4}, Masq: true, CheckedPort: "cbxa", CheckKind: nft.SrcCheckRouted}))
	if err := h.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{{}}}); err == nil {
		t.Error("an invalid address was taken")
	}
}
