package netops_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
)

// TestMoveLinkAndRestore: a device of the "node" with addresses, a custom
// MTU and up moves into a "pod" under another name (even one the node has)
// with its original name as alias, and comes back under its name with its
// addresses, MTU and up state; RestoreDevice a second time changes nothing.
func TestMoveLinkAndRestore(t *testing.T) {
	node, pod := openNS(t, "node"), openNS(t, "pod")
	_, _, err := node.EnsureVeth(netops.VethOpts{HostName: "dev0", PeerName: "eth0", Peer: node, MTU: 1400})
	must(t, err)
	addr := netip.MustParsePrefix("10.9.0.2/24")
	must(t, node.EnsureAddr("dev0", addr, netops.AddrOpts{}))
	must(t, node.SetLinkUp("dev0"))
	st, err := node.DeviceStateOf("dev0")
	must(t, err)
	if st.Name != "dev0" || st.Kind != "veth" || st.MTU != 1400 || !st.Up || !slices.Equal(st.Addrs, []netip.Prefix{addr}) {
		t.Fatalf("DeviceStateOf = %+v", st)
	}
	if l, err := node.LinkByMAC(st.MAC); err != nil || l.Name != "dev0" {
		t.Errorf("LinkByMAC = %+v, %v", l, err)
	}
	alias := "dev0"
	moved, err := node.MoveLink(netops.MoveOpts{Name: "dev0", Into: pod, NewName: "eth0", Alias: &alias})
	if errors.Is(err, netops.ErrExists) {
		t.Fatalf("MoveLink refused a name the node has: %v", err)
	}
	must(t, err)
	if moved.Name != "eth0" || moved.Up || moved.MAC.String() != st.MAC.String() {
		t.Errorf("moved = %+v", moved)
	}
	if a, err := pod.LinkAlias("eth0"); err != nil || a != "dev0" {
		t.Errorf("alias in the pod = %q, %v", a, err)
	}
	if ls, err := pod.LinksByAlias("dev0"); err != nil || len(ls) != 1 || ls[0].Name != "eth0" {
		t.Errorf("LinksByAlias = %+v, %v", ls, err)
	}
	if _, err := node.LinkByName("dev0"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("dev0 still on the node: %v", err)
	}
	if _, err := node.MoveLink(netops.MoveOpts{Name: "eth0", Into: pod}); !errors.Is(err, netops.ErrExists) {
		t.Errorf("MoveLink onto a name the pod has = %v, want ErrExists", err)
	}
	must(t, pod.SetMTU("eth0", 1300))
	must(t, pod.SetLinkUp("eth0"))
	back, err := pod.MoveLink(netops.MoveOpts{Name: "eth0", Into: node, NewName: "tmp0"})
	must(t, err)
	for range 2 {
		must(t, node.RestoreDevice(back.Name, st))
		got, err := node.DeviceStateOf("dev0")
		must(t, err)
		if got.MTU != 1400 || !got.Up || !slices.Equal(got.Addrs, st.Addrs) || got.MAC.String() != st.MAC.String() {
			t.Errorf("restored %+v, want %+v", got, st)
		}
		if a, _ := node.LinkAlias("dev0"); a != "" {
			t.Errorf("alias after restore = %q", a)
		}
		back.Name = "dev0"
	}
	if err := node.RestoreDevice("dev0", netops.DeviceState{Name: "eth0"}); !errors.Is(err, netops.ErrExists) {
		t.Errorf("RestoreDevice onto a name the node has = %v, want ErrExists", err)
	}
}
