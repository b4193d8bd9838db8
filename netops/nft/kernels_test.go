package nft

import (
	"testing"

	"github.com/cnibox/cnibox/netops/nft/nftfake"
	"github.com/cnibox/cnibox/netops/nstest"
)

// onKernels runs f on a Handle on nftfake's in-memory kernel ("fake", as
// any user) and, as root, on one on the kernel in a namespace of its own
// ("kernel"): what a table writes is checked without root, and the fake
// is held to the kernel's answers by the same test.
func onKernels(t *testing.T, prefix string, f func(t *testing.T, h *Handle)) {
	t.Run("fake", func(t *testing.T) {
		k := nftfake.New()
		h := OpenDial(k.Dial())
		t.Cleanup(func() {
			if err := h.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := k.Err(); err != nil {
				t.Errorf("the fake kernel was sent what it does not model: %v", err)
			}
		})
		f(t, h)
	})
	t.Run("kernel", func(t *testing.T) {
		h, err := Open(nstest.NewNS(t, prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		f(t, h)
	})
}
