package nft_test

import (
	"os"

	"github.com/cnibox/cnibox/netops/internal/labtest"
)

// openNS creates a namespace for the test and opens a Handle on it; both are
// released when the test ends.
var openNS = labtest.OpenNS

// must fails the test on err.
var must = labtest.Must

// openNSFile opens a namespace file, e.g. to pass its fd to nftables.
func openNSFile(path string) (*os.File, error) { return os.Open(path) }
