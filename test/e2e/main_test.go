// Package e2e drives the built cnibox binary the way container runtimes do:
// installed as symlinks in a temp dir and called through libcni, and by
// podman with its CNI backend. The whole test process runs in a private
// network namespace that stands for the node, so nothing touches the
// machine's own interfaces, routes, nftables or sysctls.
package e2e

import (
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

func TestMain(m *testing.M) {
	nstest.MainInPrivateNetns(m)
}
