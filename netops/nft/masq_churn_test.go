package nft_test

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// HasMasq finds a pod's element while other processes add and delete
// theirs in the same maps, every time: a CHECK must not report a pod's
// masquerade missing because a dump of the maps that other calls overlapped
// left it out (a kernel dump resumes by position; MasqEntries' dump missed
// the element once in 300 checks in a run of this test, rarely since, so
// this test guards HasMasq's way, a get of one element, more than it
// reproduces the dump's miss).
func TestHasMasqUnderChurn(t *testing.T) {
	t.Parallel()
	path := nstest.NewNS(t, "mqch")
	h, err := netops.Open(path)
	must(t, err)
	defer h.Close()
	pod := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 9, byte(i / 250), byte(i%250 + 1)}), 16)
	}
	for i := range 200 {
		must(t, h.NFT().EnsureMasq("n", []netip.Prefix{pod(i)}))
	}
	fixed := pod(400)
	must(t, h.NFT().EnsureMasq("n", []netip.Prefix{fixed}))
	var (
		stop    atomic.Bool
		churned atomic.Int64
		wg      sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := netops.Open(path)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for i := 0; !stop.Load(); i++ {
				p := pod(2000 + w*50 + i%50)
				if err := c.NFT().EnsureMasq("n", []netip.Prefix{p}); err != nil {
					t.Error(err)
					return
				}
				if err := c.NFT().DeleteMasq([]netip.Addr{p.Addr()}); err != nil {
					t.Error(err)
					return
				}
				churned.Add(1)
			}
		}()
	}
	// checks for as long as the others add and delete 2,000 pods' elements
	misses, checks := 0, 0
	for ; checks < 300 || churned.Load() < 2000; checks++ {
		c, err := netops.Open(path) // a CHECK is a process of its own
		must(t, err)
		ok, err := c.NFT().HasMasq(fixed.Addr())
		must(t, err)
		must(t, c.Close())
		if !ok {
			misses++
		}
	}
	stop.Store(true)
	wg.Wait()
	if misses > 0 {
		t.Errorf("HasMasq(%s) missed the element %d times of %d", fixed.Addr(), misses, checks)
	}
	if ok, err := h.NFT().HasMasq(netip.MustParseAddr("10.9.99.99")); err != nil || ok {
		t.Errorf("HasMasq of an address without an element = %v, %v", ok, err)
	}
}
