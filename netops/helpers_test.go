package netops_test

import (
	"os"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// openNS creates a namespace for the test and opens a Handle on it; both are
// released when the test ends.
func openNS(t *testing.T, prefix string) *netops.Handle {
	t.Helper()
	path := nstest.NewNS(t, prefix)
	h, err := netops.Open(path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openNSFile opens a namespace file, e.g. to pass its fd to nftables.
func openNSFile(path string) (*os.File, error) { return os.Open(path) }
