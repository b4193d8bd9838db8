package bridge_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

var nodeNSFile *os.File

// TestMain runs the package's tests in a private network namespace that
// stands for the node.
func TestMain(m *testing.M) {
	// Every thread is in the node's namespace now; a thread that a test
	// moves into a pod's namespace may stay there (the main thread cannot
	// exit), so the node is named by a descriptor, not by /proc/self/ns/net.
	if f, err := os.Open("/proc/thread-self/ns/net"); err == nil {
		nodeNSFile = f // kept open (and out of the finalizer's reach) for the run
		nodeNS = fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	}
	nstest.MainInPrivateNetns(m)
}
