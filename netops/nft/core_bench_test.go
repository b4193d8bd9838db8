package nft_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops/internal/labtest"
)

// BenchmarkPodEnsures: the per-ADD ensures of a bridge pod with macspoofchk
// on a node whose tables are in place: the MAC spoofing check of its port
// and its masquerade element.
func BenchmarkPodEnsures(b *testing.B) {
	h := labtest.OpenNS(b, "bpe")
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	n := h.NFT()
	if err := n.EnsureMacSpoofCheck("veth0", mac); err != nil {
		b.Fatal(err)
	}
	b.Run("macspoof", func(b *testing.B) {
		for b.Loop() {
			if err := n.EnsureMacSpoofCheck("veth0", mac); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("masq", func(b *testing.B) {
		ips := []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}
		for b.Loop() {
			if err := n.EnsureMasq("net", ips); err != nil {
				b.Fatal(err)
			}
		}
	})
}
