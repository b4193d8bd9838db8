package vxlan_test

import (
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestMain runs the package's tests in a private network namespace that
// stands for the node.
func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }
