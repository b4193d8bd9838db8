package ptp_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// nodeNS is a path to the node's namespace (set by TestMain).
var nodeNS = "/proc/self/ns/net"

var nodeNSFile *os.File

// TestMain runs the package's tests in a private network namespace that
// stands for the node.
func TestMain(m *testing.M) {
	// A thread that a test moves into a pod's namespace may stay there
	// (the main thread cannot exit): the node is named by a descriptor
	// opened now, not by /proc/self/ns/net.
	if f, err := os.Open("/proc/thread-self/ns/net"); err == nil {
		nodeNSFile = f // kept open for the run
		nodeNS = fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	}
	nstest.MainInPrivateNetns(m)
}
