package nft_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

func TestMasq(t *testing.T) {
	t.Parallel()
	labtest.OnNFT(t, "mq", testMasq)
}

func testMasq(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr

	// Deleting before anything exists is fine.
	must(t, h.DeleteMasq([]netip.Addr{addr("10.1.0.5")}))
	if got, err := h.MasqEntries(); err != nil || len(got) != 0 {
		t.Fatalf("MasqEntries() on an empty namespace = %v, %v", got, err)
	}

	adds := []struct {
		network string
		ips     []netip.Prefix
	}{
		{"net1", []netip.Prefix{pfx("10.1.0.5/24"), pfx("fd01::5/64")}},
		{"net1", []netip.Prefix{pfx("10.1.0.6/24")}},
		{"net1", []netip.Prefix{pfx("10.1.0.6/24")}}, // again
		{"net2", []netip.Prefix{pfx("10.2.0.5/16")}},
	}
	for _, a := range adds {
		must(t, h.EnsureMasq(a.network, a.ips))
	}
	want := []nft.MasqEntry{
		{PodIP: addr("10.1.0.5"), Subnet: pfx("10.1.0.0/24"), Network: "net1"},
		{PodIP: addr("10.1.0.6"), Subnet: pfx("10.1.0.0/24"), Network: "net1"},
		{PodIP: addr("10.2.0.5"), Subnet: pfx("10.2.0.0/16"), Network: "net2"},
		{PodIP: addr("fd01::5"), Subnet: pfx("fd01::/64"), Network: "net1"},
	}
	checkEntries(t, h, want)

	// One chain per (network, subnet): the two net1 pods share theirs.
	wantChains := []string{"postrouting",
		nft.MasqChain("net1", pfx("10.1.0.0/24")),
		nft.MasqChain("net1", pfx("fd01::/64")),
		nft.MasqChain("net2", pfx("10.2.0.0/16")),
	}
	checkMasqChains(t, k, wantChains)

	t.Run("address moves to another network", func(t *testing.T) {
		must(t, h.EnsureMasq("net3", []netip.Prefix{pfx("10.1.0.6/24")}))
		w := slices.Clone(want)
		w[1].Network = "net3"
		checkEntries(t, h, w)
		must(t, h.EnsureMasq("net1", []netip.Prefix{pfx("10.1.0.6/24")}))
		checkEntries(t, h, want)
	})

	t.Run("delete", func(t *testing.T) {
		del := []netip.Addr{addr("10.1.0.5"), addr("fd01::5"), addr("10.9.9.9")}
		must(t, h.DeleteMasq(del))
		must(t, h.DeleteMasq(del))
		checkEntries(t, h, []nft.MasqEntry{want[1], want[2]})
		// The subnet chain stays for the other pod.
		checkMasqChains(t, k, append(wantChains, nft.MasqChain("net3", pfx("10.1.0.0/24"))))
		must(t, h.DeleteMasq([]netip.Addr{addr("10.1.0.6"), addr("10.2.0.5")}))
		checkEntries(t, h, nil)
	})

	t.Run("invalid", func(t *testing.T) {
		if err := h.EnsureMasq("", []netip.Prefix{pfx("10.1.0.5/24")}); err == nil {
			t.Error("EnsureMasq with an empty network succeeded")
		}
		if err := h.EnsureMasq("net1", []netip.Prefix{{}}); err == nil {
			t.Error("EnsureMasq with an invalid prefix succeeded")
		}
		if err := h.DeleteMasq([]netip.Addr{{}}); err == nil {
			t.Error("DeleteMasq with an invalid address succeeded")
		}
	})
}

func TestMasqChain(t *testing.T) {
	t.Parallel()
	a := nft.MasqChain("net1", netip.MustParsePrefix("10.1.0.0/24"))
	tests := []struct {
		network string
		subnet  string
		same    bool
	}{
		{"net1", "10.1.0.0/24", true},
		{"net1", "10.1.0.77/24", true}, // same subnet
		{"net2", "10.1.0.0/24", false},
		{"net1", "10.1.0.0/25", false},
	}
	for _, tt := range tests {
		got := nft.MasqChain(tt.network, netip.MustParsePrefix(tt.subnet))
		if (got == a) != tt.same || len(got) > 31 || !strings.HasPrefix(got, "m-") {
			t.Errorf("MasqChain(%s, %s) = %q (first %q), same = %v", tt.network, tt.subnet, got, a, tt.same)
		}
	}
}

func checkEntries(t *testing.T, h *nft.Handle, want []nft.MasqEntry) {
	t.Helper()
	got, err := h.MasqEntries()
	must(t, err)
	cmp := func(a, b nft.MasqEntry) int { return a.PodIP.Compare(b.PodIP) }
	slices.SortFunc(got, cmp)
	want = slices.Clone(want)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Errorf("MasqEntries() = %+v\nwant %+v", got, want)
	}
}

// checkMasqChains compares the chains of the inet cnibox table of k with
// want.
func checkMasqChains(t *testing.T, k *labtest.NFT, want []string) {
	t.Helper()
	chains, err := connOf(t, k).ListChainsOfTableFamily(nftables.TableFamilyINet)
	must(t, err)
	var got []string
	for _, ch := range chains {
		if ch.Table.Name == nft.MasqTable {
			got = append(got, ch.Name)
		}
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("chains = %v, want %v", got, want)
	}
}
