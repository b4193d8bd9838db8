package nft

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestDeleteMasqFallback covers the path for kernels without
// NFT_MSG_DESTROYSETELEM (and for a missing table): get each element, delete
// those that exist.
func TestDeleteMasqFallback(t *testing.T) {
	t.Parallel()
	h, err := Open(nstest.NewNS(t, "mqf"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	key := func(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

	if _, err := h.nftConn(); err != nil {
		t.Fatal(err)
	}
	// No table yet.
	if err := delExisting(h, [][]byte{key("10.1.0.5")}, [][]byte{key("fd01::5")}); err != nil {
		t.Fatalf("delete without a table: %v", err)
	}
	if err := h.EnsureMasq("n", []netip.Prefix{
		netip.MustParsePrefix("10.1.0.5/24"), netip.MustParsePrefix("10.1.0.6/24"), netip.MustParsePrefix("fd01::5/64"),
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := delExisting(h, [][]byte{key("10.1.0.5"), key("10.1.0.7")}, [][]byte{key("fd01::5")}); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	got, err := h.MasqEntries()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PodIP != netip.MustParseAddr("10.1.0.6") {
		t.Fatalf("MasqEntries() = %+v, want only 10.1.0.6", got)
	}
}

// delExisting is DeleteMasq's path for kernels without DESTROYSETELEM.
func delExisting(h *Handle, keys4, keys6 [][]byte) error {
	_, err := h.delPresentElems(nftables.TableFamilyINet, MasqTable, setKeys{masqMap4, keys4}, setKeys{masqMap6, keys6})
	return err
}
