package agent

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/store"
)

// TestSecondAgentRefused: a second agent on the same data directory fails
// with ErrAgentRunning naming the lock file; once the first ends, the
// directory is free again.
func TestSecondAgentRefused(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	if !errors.Is(err, ErrAgentRunning) || !strings.Contains(err.Error(), LockFileName) {
		t.Fatalf("second agent on %s: %v; want ErrAgentRunning naming %s", dir, err, LockFileName)
	}
	unlock()
	unlock2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("after the first agent ended: %v", err)
	}
	unlock2()
}

// TestStoredMACOnlyOwnLease: the stored VTEP MAC is reused only when the
// stored lease has this node's public IP (a data directory copied from
// another node holds that node's MAC).
func TestStoredMACOnlyOwnLease(t *testing.T) {
	l := store.OverlayLease{Node: "node-a", PublicIP: netip.MustParseAddr("192.0.2.1"), VTEPMAC: "02:00:00:00:00:01",
		PublicIPv6: netip.MustParseAddr("2001:db8::1"), VTEPMAC6: "02:00:00:00:00:02"}
	own := underlay{Public4: netip.MustParseAddr("192.0.2.1"), Public6: netip.MustParseAddr("2001:db8::1")}
	other := underlay{Public4: netip.MustParseAddr("192.0.2.2"), Public6: netip.MustParseAddr("2001:db8::2")}
	if mac, ok := storedMAC(l, false, own, "node-a"); !ok || mac.String() != "02:00:00:00:00:01" {
		t.Errorf("own lease, IPv4: %v %v; want the stored MAC", mac, ok)
	}
	if mac, ok := storedMAC(l, true, own, "node-a"); !ok || mac.String() != "02:00:00:00:00:02" {
		t.Errorf("own lease, IPv6: %v %v; want the stored MAC", mac, ok)
	}
	for _, v6 := range []bool{false, true} {
		if mac, ok := storedMAC(l, v6, other, "node-a"); ok {
			t.Errorf("another node's lease (v6 %v): reused %v", v6, mac)
		}
		// A disk image copied to another node with the same public IP
		// (addresses handed out again): the node name tells them apart.
		if mac, ok := storedMAC(l, v6, own, "node-b"); ok {
			t.Errorf("the lease of node-a on node-b (v6 %v): reused %v", v6, mac)
		}
	}
	// A store written before leases carried the node name: the public IP decides.
	l.Node = ""
	if _, ok := storedMAC(l, false, own, "node-b"); !ok {
		t.Error("a lease without a node name and this node's public IP: not reused")
	}
}
