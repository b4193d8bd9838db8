package main

import (
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestMain runs the package's tests, as root, in a private network
// namespace that stands for the node: runAgent cleans up what an earlier
// agent left (the DNS proxy's table and routing rules, ...) in the
// namespace it runs in, which must never be the machine's.
func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }
