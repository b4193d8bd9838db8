package attach_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// TestHostVethNameIsTheBridgeRoles: ptp's host ends are named as the
// bridge role's, which the CLI's gc, doctor and inspect recognise.
func TestHostVethNameIsTheBridgeRoles(t *testing.T) {
	for _, k := range [][2]string{{"c1", "eth0"}, {"0123456789abcdef", "net1"}, {"x", "eth0"}} {
		got := attach.HostVethName(k[0], k[1])
		if want := bridge.HostVethName(k[0], k[1]); got != want || !bridge.IsHostVeth(got) {
			t.Errorf("HostVethName(%q, %q) = %q, bridge's is %q (IsHostVeth %v)", k[0], k[1], got, want, bridge.IsHostVeth(got))
		}
	}
}
