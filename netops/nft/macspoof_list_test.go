package nft_test

import (
	"net"
	"slices"
	"testing"
)

// TestMacSpoofPorts lists the ports with a MAC spoofing check.
func TestMacSpoofPorts(t *testing.T) {
	h := openNS(t, "spoofls")
	got, err := h.NFT().MacSpoofPorts()
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("a fresh namespace has checks on %v", got)
	}
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	must(t, h.NFT().EnsureMacSpoofCheck("cbxb", mac))
	must(t, h.NFT().EnsureMacSpoofCheck("cbxa", mac))
	got, err = h.NFT().MacSpoofPorts()
	must(t, err)
	if want := []string{"cbxa", "cbxb"}; !slices.Equal(got, want) {
		t.Errorf("MacSpoofPorts() = %v, want %v", got, want)
	}
	must(t, h.NFT().DeleteMacSpoofCheck("cbxa"))
	got, err = h.NFT().MacSpoofPorts()
	must(t, err)
	if want := []string{"cbxb"}; !slices.Equal(got, want) {
		t.Errorf("after delete: MacSpoofPorts() = %v, want %v", got, want)
	}
}
