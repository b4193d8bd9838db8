package nft_test

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// openNS creates a namespace for the test and opens a Handle on it; both are
// released when the test ends.
var openNS = labtest.OpenNS

// must fails the test on err.
var must = labtest.Must

// openNSFile opens a namespace file, e.g. to pass its fd to nftables.
func openNSFile(path string) (*os.File, error) { return os.Open(path) }

// dial connects from the namespace at from to srv within half a second
// (what the rules drop times out) and returns why it could not.
func dial(t *testing.T, from string, srv netip.AddrPort) error {
	return nstest.Run(t, from, func() error {
		c, err := net.DialTimeout("tcp", srv.String(), 500*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// checkBridgeChains compares the chains of the bridge cnibox table with want.
func checkBridgeChains(t *testing.T, h *netops.Handle, want []string) {
	t.Helper()
	checkFamilyChains(t, h, nftables.TableFamilyBridge, want)
}

// checkFamilyChains compares the chains of the cnibox table of family with
// want, reading them with nftables directly.
func checkFamilyChains(t *testing.T, h *netops.Handle, family nftables.TableFamily, want []string) {
	t.Helper()
	ns, err := openNSFile(h.Path())
	must(t, err)
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	must(t, err)
	chains, err := c.ListChainsOfTableFamily(family)
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
		t.Errorf("chains of family %v = %v, want %v", family, got, want)
	}
}

// connOf returns a google/nftables connection to k's kernel, as another
// program would read or change the tables (labtest stays out of
// google/nftables: the nftables room is netops/nft and its fake).
func connOf(t testing.TB, k *labtest.NFT) *nftables.Conn {
	t.Helper()
	if k.Fake != nil {
		c, err := k.Fake.Conn()
		must(t, err)
		return c
	}
	f, err := os.Open(k.Path)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	return c
}
