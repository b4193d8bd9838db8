package labtest

import (
	"os"
	"testing"

	mdnetlink "github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
	"github.com/cnibox/cnibox/netops/nstest"
)

// NFT is the nftables side of a test: a Handle, and the kernel under it,
// either netops/nft/nftfake's in-memory kernel (Fake) or the kernel in a
// namespace of the test's (Path).
type NFT struct {
	*nft.Handle
	Fake *nftfake.Kernel // nil on the kernel
	Path string          // the namespace's, on the kernel
	t    testing.TB
}

// OnNFT runs f on a fake kernel ("fake", as any user) and, as root, on the
// kernel in a namespace of its own ("kernel"): a table's writes are
// checked as a normal user, and the fake held to the kernel by the same
// test. Use it where what matters is what a table writes, not the packets
// it judges.
func OnNFT(t *testing.T, prefix string, f func(t *testing.T, k *NFT)) {
	t.Run("fake", func(t *testing.T) { f(t, FakeNFT(t)) })
	t.Run("kernel", func(t *testing.T) { f(t, KernelNFT(t, prefix)) })
}

// FakeNFT returns an NFT on a new fake kernel; at the end of the test the
// Handle is closed and the test fails if the fake was sent what it does
// not model.
func FakeNFT(t testing.TB) *NFT {
	t.Helper()
	k := &NFT{Fake: nftfake.New(), t: t}
	k.Handle = k.Open()
	t.Cleanup(func() {
		if err := k.Fake.Err(); err != nil {
			t.Errorf("the fake kernel was sent what it does not model: %v", err)
		}
	})
	return k
}

// KernelNFT returns an NFT on the kernel, in a new namespace (root only:
// it skips the test otherwise).
func KernelNFT(t testing.TB, prefix string) *NFT {
	t.Helper()
	k := &NFT{Path: nstest.NewNS(t, prefix), t: t}
	k.Handle = k.Open()
	return k
}

// Open returns another Handle on the same kernel, closed when the test
// ends.
func (k *NFT) Open() *nft.Handle {
	var h *nft.Handle
	if k.Fake != nil {
		h = nft.OpenDial(k.Fake.Dial())
	} else {
		var err error
		if h, err = nft.Open(k.Path); err != nil {
			k.t.Fatalf("nft.Open(%q): %v", k.Path, err)
		}
	}
	k.t.Cleanup(func() {
		if err := h.Close(); err != nil {
			k.t.Errorf("Close: %v", err)
		}
	})
	return h
}

// Another returns an NFT on a new, empty kernel of the same kind.
func (k *NFT) Another(prefix string) *NFT {
	if k.Fake != nil {
		return FakeNFT(k.t)
	}
	return KernelNFT(k.t, prefix)
}

// Raw returns a netlink socket on the kernel, for raw nftables requests.
func (k *NFT) Raw() *mdnetlink.Conn {
	if k.Fake != nil {
		return nltest.Dial(k.Fake.Dial())
	}
	f, err := os.Open(k.Path)
	Must(k.t, err)
	defer f.Close()
	c, err := mdnetlink.Dial(unix.NETLINK_NETFILTER, &mdnetlink.Config{NetNS: int(f.Fd())})
	Must(k.t, err)
	k.t.Cleanup(func() { c.Close() })
	return c
}
