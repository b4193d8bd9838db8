package flannel_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/flannel"
	"github.com/cnibox/cnibox/roles/internal/delegatetest"
)

// TestDelConfigRefused: flannel's config edited in place after ADD into one
// ADD refuses (the delegate's mtu 70000) does not stop DEL (twice): it
// replays the recorded delegate, and the pod's veth, address and record go
// (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n, _ := delegatetest.FlannelNode(t, "10.244.12.1/24")
	p := n.NewPod("delref")
	edit := map[string]any{"delegate": map[string]any{"bridge": "fl-delref", "mtu": 70000}}
	n.DelRefused(flannel.Role, p, []byte(flannelConf("1.0.0", "fl-delref")), edit, "")
	if got := n.Reservations("cbr0"); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if got := n.Records("cbr0"); len(got) != 0 {
		t.Errorf("records left after DEL: %+v", got)
	}
}
