package dummy_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/dummy"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestKernelWithoutDummy: on a kernel without dummy devices the ADD names
// what the node lacks (CONFIG_DUMMY, module dummy) and leaves nothing; on
// one with them (make test-kernel) it succeeds.
func TestKernelWithoutDummy(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("dmk")
	c := conf("1.0.0", v4)
	out, err := n.Call(dummy.Role, "ADD", p, c)
	if roletest.KernelKind(t, "dummy", err, 5) {
		n.CheckDelTwice(dummy.Role, p, c, out, "1.0.0", "dmnet")
		return
	}
	n.Empty("dmnet")
}
