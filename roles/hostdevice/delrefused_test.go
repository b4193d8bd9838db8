package hostdevice

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestDelConfigRefused: a config edited in place after ADD into one ADD
// refuses (an hwaddr that is no MAC) does not stop DEL (twice): the device
// is back on the node as it was, the record and the addresses go (issue
// 62).
func TestDelConfigRefused(t *testing.T) {
	n := newNode(t)
	st := newDevice(t, "dev0")
	p := n.NewPod("delref")
	n.DelRefused(Role, p, netConf("1.0.0", `,"device":"dev0"`, v4), map[string]any{"hwaddr": "not-a-mac"}, "hwaddr")
	if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is still there after DEL")
	}
	backAsItWas(t, st)
	n.Empty("hdnet")
}
