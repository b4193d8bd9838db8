// Package reliability proves that cnibox loses nothing and leaks nothing:
// crashes at every fault point of ADD and DEL (a build with the faultpoints
// tag), reboots, storms of parallel calls, a held store lock, broken store
// files and hostile input, each followed by what a runtime does (retry, DEL,
// GC) and a look at what is left in the store and the kernel.
//
// The whole test process runs in a private network namespace that stands for
// the node (nstest.MainInPrivateNetns); every pod namespace is created and
// removed by the test.
package reliability

import (
	"os"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

func TestMain(m *testing.M) {
	nstest.MainInPrivateNetns(cleanRun{m})
}

// cleanRun removes the binaries the tests built once they have run.
type cleanRun struct{ m *testing.M }

func (c cleanRun) Run() int {
	code := c.m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	return code
}
