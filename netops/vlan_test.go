package netops_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestEnsureVlan: an 802.1Q device is created down, directly in another
// namespace under its final name (which a device on the node may share),
// with the VLAN ID and MTU asked for; a second call keeps it; the same name
// with another VLAN ID, or a device of another kind, is ErrExists; another
// device of the same VLAN ID on the master is refused.
func TestEnsureVlan(t *testing.T) {
	node, pod := openNS(t, "vlnode"), openNS(t, "vlpod")
	nic(t, node)
	_, _, err := node.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0p", Peer: node})
	must(t, err)
	o := netops.VlanOpts{Name: "eth0", Master: "nic0", Into: pod, ID: 42, MTU: 1400}
	v, err := node.EnsureVlan(o)
	nstest.SkipIfKernelLacks(t, "802.1Q (8021q)", err)
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != "vlan" || v.ID != 42 || v.MTU != 1400 || v.Up {
		t.Errorf("created %+v; want a down vlan 42 with mtu 1400", v)
	}
	if got, err := pod.VlanByName("eth0"); err != nil || got.ID != 42 || got.Index != v.Index {
		t.Errorf("VlanByName = %+v, %v; want the device, VLAN 42", got, err)
	}
	if l, err := node.LinkByName("eth0"); err != nil || l.Kind != "veth" {
		t.Errorf("the node's own eth0 = %+v, %v; want it untouched", l, err)
	}
	if again, err := node.EnsureVlan(o); err != nil || again.Index != v.Index {
		t.Errorf("second EnsureVlan = %+v, %v; want the same device", again, err)
	}
	o.ID = 43
	if _, err := node.EnsureVlan(o); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureVlan with another VLAN ID = %v, want ErrExists", err)
	}
	if _, err := node.EnsureVlan(netops.VlanOpts{Name: "v42", Master: "nic0", ID: 42}); err == nil || errors.Is(err, netops.ErrExists) || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("EnsureVlan of VLAN 42 again on nic0 = %v, want an error saying it is in use (not ErrExists)", err)
	}
	if _, err := node.EnsureVlan(netops.VlanOpts{Name: "eth0p", Master: "nic0", ID: 7}); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureVlan over a veth = %v, want ErrExists", err)
	}
	if _, err := node.EnsureVlan(netops.VlanOpts{Name: "v0", Master: "nope0", ID: 7}); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("EnsureVlan on a missing master = %v, want ErrNotFound", err)
	}
	for _, id := range []int{-1, 4095} {
		if _, err := node.EnsureVlan(netops.VlanOpts{Name: "v0", Master: "nic0", ID: id}); err == nil {
			t.Errorf("EnsureVlan with VLAN ID %d succeeded", id)
		}
	}
	// VLAN 0 (priority tags only) is a valid ID, created on the master's
	// namespace itself.
	if v0, err := node.EnsureVlan(netops.VlanOpts{Name: "v0", Master: "nic0"}); err != nil || v0.ID != 0 || v0.Kind != "vlan" {
		t.Errorf("EnsureVlan of VLAN 0 on the node = %+v, %v", v0, err)
	}
	must(t, pod.DeleteLink("eth0"))
	must(t, pod.DeleteLink("eth0"))
	if _, err := pod.VlanByName("eth0"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("VlanByName after DeleteLink = %v, want ErrNotFound", err)
	}
}

// TestVlanByNameOtherKind: VlanByName of a device that is not a VLAN
// reports its kind and works without 802.1Q in the kernel.
func TestVlanByNameOtherKind(t *testing.T) {
	node := openNS(t, "vlkind")
	nic(t, node)
	v, err := node.VlanByName("nic0")
	if err != nil || v.Kind != "veth" || v.ID != 0 {
		t.Errorf("VlanByName(nic0) = %+v, %v; want a veth", v, err)
	}
	if _, err := node.VlanByName("nope0"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("VlanByName(nope0) = %v, want ErrNotFound", err)
	}
}
