package nft_test

import (
	"net"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops/internal/labtest"
)

// TestMacSpoofPorts lists the ports with a MAC spoofing check.
func TestMacSpoofPorts(t *testing.T) {
	t.Parallel()
	labtest.OnNFT(t, "spoofls", testMacSpoofPorts)
}

func testMacSpoofPorts(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	got, err := h.MacSpoofPorts()
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("a fresh namespace has checks on %v", got)
	}
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	must(t, h.EnsureMacSpoofCheck("cbxb", mac))
	must(t, h.EnsureMacSpoofCheck("cbxa", mac))
	got, err = h.MacSpoofPorts()
	must(t, err)
	if want := []string{"cbxa", "cbxb"}; !slices.Equal(got, want) {
		t.Errorf("MacSpoofPorts() = %v, want %v", got, want)
	}
	must(t, h.DeleteMacSpoofCheck("cbxa"))
	got, err = h.MacSpoofPorts()
	must(t, err)
	if want := []string{"cbxb"}; !slices.Equal(got, want) {
		t.Errorf("after delete: MacSpoofPorts() = %v, want %v", got, want)
	}
}
