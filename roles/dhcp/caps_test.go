package dhcp_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

// TestDaemonCapabilities: the daemon as its DaemonSet runs it, as root with
// every capability dropped but the ones the manifests add. NET_ADMIN and
// NET_RAW alone are not enough: entering the pod's network namespace
// (setns) is refused without SYS_ADMIN, and the ADD fails saying so. With
// SYS_ADMIN added it gets the lease: those three are all it needs (no
// DAC_OVERRIDE, CHOWN, ... for its socket and store).
func TestDaemonCapabilities(t *testing.T) {
	setpriv := nstest.RequireProgram(t, "setpriv", "util-linux")
	n := newNode(t)
	newLAN(t)
	for _, tc := range []struct {
		caps string
		ok   bool
	}{
		{"+net_admin,+net_raw", false},
		{"+net_admin,+net_raw,+sys_admin", true},
	} {
		t.Run(tc.caps, func(t *testing.T) {
			// root keeps the bounding set's capabilities across exec and
			// no more; no_new_privs as allowPrivilegeEscalation: false
			d := startDaemonUnder(t, []string{setpriv, "--bounding-set=-all," + tc.caps, "--inh-caps=-all", "--no-new-privs", "--"}, t.TempDir())
			c := conf("1.1.0", d.socket, "")
			p := n.NewPod("caps")
			out, err := n.Call(macvlan.Role, "ADD", p, c)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("ADD with %s: %v", tc.caps, err)
			case !tc.ok && err == nil:
				t.Fatalf("ADD with %s only succeeded: SYS_ADMIN is not needed after all (take it out of the manifests)", tc.caps)
			case !tc.ok:
				// setns, for the netlink socket or the DHCP client's
				t.Logf("ADD with %s: %v", tc.caps, err)
				if msg := err.Error(); !strings.Contains(msg, "network namespace") || !strings.Contains(msg, "operation not permitted") {
					t.Errorf("ADD with %s: %v, want setns refused (operation not permitted)", tc.caps, err)
				}
			}
			if tc.ok {
				if r := roletest.Result(t, out, "1.1.0"); len(r.IPs) != 1 || !netip.MustParsePrefix("10.56.0.0/24").Contains(netip.MustParseAddr(r.IPs[0].Address.IP.String())) {
					t.Errorf("ADD with %s: %+v, want a lease of 10.56.0.0/24", tc.caps, r.IPs)
				}
			}
			n.Must(macvlan.Role, "DEL", p, c)
		})
	}
}
