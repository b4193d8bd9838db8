package nft_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestSourceCheckGaps: SourceCheckGaps names each element of a port's check
// that the kernel lacks, in every table of its kind (the ARP table of a
// routed veth too), and nothing when all are there: before the first check
// (no tables), after an element or a whole table was deleted behind
// cnibox's back, for an address never added, after DeleteSourceCheck. A
// pod with IPv6 has its link-local address (PodLinkLocal) checked too.
func TestSourceCheckGaps(t *testing.T) { labtest.OnNFT(t, "srcgap", testSourceCheckGaps) }

func testSourceCheckGaps(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	a4, a6 := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00:1::2")
	other := netip.MustParseAddr("10.1.0.3")
	gaps := func(kind nft.SrcCheckKind, port string, addrs ...netip.Addr) []nft.SourceCheckGap {
		t.Helper()
		g, err := h.SourceCheckGaps(kind, port, addrs)
		must(t, err)
		return g
	}
	expect := func(what string, got []nft.SourceCheckGap, want ...nft.SourceCheckGap) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: gaps %v, want %v", what, got, want)
		}
	}
	inet, arp, br := "inet cnibox-src", "arp cnibox-src", "bridge cnibox-src"
	port := nft.SourceCheckGap{Set: "ports"}
	in := func(table string, g nft.SourceCheckGap) nft.SourceCheckGap { g.Table = table; return g }
	ll := func(port string) nft.SourceCheckGap {
		return nft.SourceCheckGap{Set: "addr6", Addr: nft.PodLinkLocal(port)}
	}

	expect("no tables yet", gaps(nft.SrcCheckRouted, "cbxa", a4, a6),
		in(inet, port), in(inet, nft.SourceCheckGap{Set: "addr4", Addr: a4}), in(inet, nft.SourceCheckGap{Set: "addr6", Addr: a6}), in(inet, ll("cbxa")),
		in(arp, port), in(arp, nft.SourceCheckGap{Set: "addr4", Addr: a4}))

	must(t, h.EnsureSourceCheck(nft.SrcCheckRouted, "cbxa", []netip.Addr{a4, a6}))
	must(t, h.EnsureSourceCheck(nft.SrcCheckRouted, "cbxb", []netip.Addr{other}))
	expect("after EnsureSourceCheck", gaps(nft.SrcCheckRouted, "cbxa", a4, a6))
	expect("an address never added", gaps(nft.SrcCheckRouted, "cbxa", a4, other),
		in(inet, nft.SourceCheckGap{Set: "addr4", Addr: other}), in(arp, nft.SourceCheckGap{Set: "addr4", Addr: other}))

	// Someone deletes one element of the ARP table, then the inet table.
	c := connOf(t, k)
	arpTable := &nftables.Table{Name: nft.SrcCheckTable, Family: nftables.TableFamilyARP}
	addr4 := &nftables.Set{Table: arpTable, Name: "addr4", KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr), Concatenation: true}
	key := append(make([]byte, 16), a4.AsSlice()...)
	copy(key, "cbxa")
	must(t, c.SetDeleteElements(addr4, []nftables.SetElement{{Key: key}}))
	must(t, c.Flush())
	expect("an ARP element deleted", gaps(nft.SrcCheckRouted, "cbxa", a4, a6), in(arp, nft.SourceCheckGap{Set: "addr4", Addr: a4}))
	expect("another port", gaps(nft.SrcCheckRouted, "cbxb", other))
	c.DelTable(&nftables.Table{Name: nft.SrcCheckTable, Family: nftables.TableFamilyINet})
	must(t, c.Flush())
	expect("the inet table deleted", gaps(nft.SrcCheckRouted, "cbxa", a4, a6),
		in(inet, port), in(inet, nft.SourceCheckGap{Set: "addr4", Addr: a4}), in(inet, nft.SourceCheckGap{Set: "addr6", Addr: a6}), in(inet, ll("cbxa")),
		in(arp, nft.SourceCheckGap{Set: "addr4", Addr: a4}))

	// A bridge port: one table, IPv6 in it.
	must(t, h.EnsureSourceCheck(nft.SrcCheckBridge, "veth0", []netip.Addr{a4, a6}))
	expect("bridge port checked", gaps(nft.SrcCheckBridge, "veth0", a4, a6))
	must(t, h.DeleteSourceCheck(nft.SrcCheckBridge, "veth0", nil))
	expect("bridge port's check deleted", gaps(nft.SrcCheckBridge, "veth0", a4, a6),
		in(br, port), in(br, nft.SourceCheckGap{Set: "addr4", Addr: a4}), in(br, nft.SourceCheckGap{Set: "addr6", Addr: a6}), in(br, ll("veth0")))
}
