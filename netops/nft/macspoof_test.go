package nft_test

import (
	"net"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestMacSpoofCheck(t *testing.T) {
	t.Parallel()
	l := labtest.New(t, 2)
	pod0, err := l.Pods[0].LinkByName("eth0")
	must(t, err)
	pod1, err := l.Pods[1].LinkByName("eth0")
	must(t, err)
	b4, _ := labtest.PodAddrs(1)
	srv := nstest.Serve(t, l.Pods[1].Path(), b4.Addr())
	a4, _ := labtest.PodAddrs(0)

	// Deleting a check that was never made is fine.
	must(t, l.Host.NFT().DeleteMacSpoofCheck("veth0"))

	// The pod's own MAC passes.
	must(t, l.Host.NFT().EnsureMacSpoofCheck("veth0", pod0.MAC))
	must(t, l.Host.NFT().EnsureMacSpoofCheck("veth0", pod0.MAC))
	must(t, l.Host.NFT().EnsureMacSpoofCheck("veth1", pod1.MAC))
	checkBridgeChains(t, l.Host, []string{"prerouting", nft.MacSpoofChain("veth0"), nft.MacSpoofChain("veth1")})
	if got := nstest.SeenFrom(t, l.Pods[0].Path(), srv); got != a4.Addr() {
		t.Errorf("pod 1 saw %v, want %v", got, a4.Addr())
	}

	// Another MAC is dropped at the bridge.
	must(t, l.Host.NFT().EnsureMacSpoofCheck("veth0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}))
	if err := dial(t, l.Pods[0].Path(), srv); err == nil {
		t.Error("a pod with a spoofed MAC reached the other pod")
	}

	must(t, l.Host.NFT().DeleteMacSpoofCheck("veth0"))
	must(t, l.Host.NFT().DeleteMacSpoofCheck("veth0"))
	checkBridgeChains(t, l.Host, []string{"prerouting", nft.MacSpoofChain("veth1")})
	if got := nstest.SeenFrom(t, l.Pods[0].Path(), srv); got != a4.Addr() {
		t.Errorf("after DeleteMacSpoofCheck pod 1 saw %v, want %v", got, a4.Addr())
	}
	if err := l.Host.NFT().EnsureMacSpoofCheck("veth0", nil); err == nil {
		t.Error("EnsureMacSpoofCheck without a MAC succeeded")
	}
}

// TestMacSpoofCheckConcurrentDelete: a DEL and a GC removing the same port's
// check at once both succeed (whichever loses the race finds it gone).
func TestMacSpoofCheckConcurrentDelete(t *testing.T) {
	t.Parallel()
	l := labtest.New(t, 1)
	pod0, err := l.Pods[0].LinkByName("eth0")
	must(t, err)
	for i := 0; i < 50; i++ {
		must(t, l.Host.NFT().EnsureMacSpoofCheck("veth0", pod0.MAC))
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				h, err := netops.Open(l.Host.Path())
				if err == nil {
					err = h.NFT().DeleteMacSpoofCheck("veth0")
					h.Close()
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: concurrent delete: %v", i, err)
			}
		}
		checkBridgeChains(t, l.Host, []string{"prerouting"})
	}
}
