package cli

import (
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestMain runs the package's tests in a private network namespace that
// stands for the node: the doctor tests make bridges, veths and routes
// there.
func TestMain(m *testing.M) {
	nstest.MainInPrivateNetns(m)
}
