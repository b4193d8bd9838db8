package netops_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestEnsureMacvlan: a macvlan is created down, directly in another
// namespace under its final name, with the mode, MTU and MAC asked for,
// also when the node has an interface of that name (6.1 looks the name up
// on the node's side); a second call keeps it; a device of that name in
// another mode is ErrExists.
func TestEnsureMacvlan(t *testing.T) {
	node, pod := openNS(t, "mvnode"), openNS(t, "mvpod")
	nic(t, node)
	nodeEth0(t, node)
	mac := net.HardwareAddr{0x0a, 0, 0, 0, 0, 0x42}
	o := netops.SubLinkOpts{Name: "eth0", Master: "nic0", Into: pod, Mode: "private", MTU: 1400, MAC: mac, BCQueueLen: 50}
	l, err := node.EnsureMacvlan(o)
	if err != nil {
		t.Fatal(err)
	}
	if l.Kind != "macvlan" || l.Mode != "private" || l.MTU != 1400 || l.MAC.String() != mac.String() || l.Up {
		t.Errorf("created %+v; want a down macvlan, private, mtu 1400, mac %s", l, mac)
	}
	if n, err := node.LinkByName("eth0"); err != nil || n.Kind != "veth" {
		t.Errorf("the node's own eth0 = %+v, %v; want it untouched", n, err)
	}
	if again, err := node.EnsureMacvlan(o); err != nil || again.Index != l.Index {
		t.Errorf("second EnsureMacvlan = %+v, %v; want the same device", again, err)
	}
	o.Mode = "bridge"
	if _, err := node.EnsureMacvlan(o); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureMacvlan in another mode = %v, want ErrExists", err)
	}
	if _, err := node.EnsureMacvlan(netops.SubLinkOpts{Name: "mv1", Master: "nic0", Mode: "nosuch"}); err == nil {
		t.Error("EnsureMacvlan with an unknown mode succeeded")
	}
	if _, err := node.EnsureMacvlan(netops.SubLinkOpts{Name: "mv1", Master: "nope0"}); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("EnsureMacvlan on a missing master = %v, want ErrNotFound", err)
	}
}

// TestEnsureIpvlan: an ipvlan has its master's MAC and its mode.
func TestEnsureIpvlan(t *testing.T) {
	node, pod := openNS(t, "ipnode"), openNS(t, "ippod")
	nic(t, node)
	nodeEth0(t, node)
	l, err := node.EnsureIpvlan(netops.SubLinkOpts{Name: "eth0", Master: "nic0", Into: pod, Mode: "l3"})
	nstest.SkipIfKernelLacks(t, "ipvlan", err)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := node.LinkByName("nic0")
	if l.Kind != "ipvlan" || l.Mode != "l3" || l.MAC.String() != m.MAC.String() {
		t.Errorf("created %+v; want an ipvlan in l3 with the master's MAC %s", l, m.MAC)
	}
	if _, err := node.EnsureIpvlan(netops.SubLinkOpts{Name: "x", Master: "nic0", MAC: m.MAC}); err == nil {
		t.Error("EnsureIpvlan with a MAC succeeded")
	}
}

// nodeEth0 gives the node an interface called eth0, the pod's name in the
// tests: kernels that look a new device's name up on the sender's side (6.1)
// refuse it there unless the device is made under another name first.
func nodeEth0(t *testing.T, node *netops.Handle) {
	t.Helper()
	if _, _, err := node.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0p", Peer: node}); err != nil {
		t.Fatal(err)
	}
}

// TestHostRouteAndNoPrefixRoute: an address added with NoPrefixRoute brings
// no subnet route, and EnsureHostRoute routes one address out of a device.
func TestHostRouteAndNoPrefixRoute(t *testing.T) {
	h := openNS(t, "hr")
	_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "d0", PeerName: "d0p", Peer: h})
	must(t, err)
	must(t, h.EnsureAddr("d0", netip.MustParsePrefix("10.9.0.5/24"), netops.AddrOpts{NoPrefixRoute: true}))
	must(t, h.EnsureHostRoute("d0", netip.MustParseAddr("10.9.1.7")))
	must(t, h.EnsureHostRoute("d0", netip.MustParseAddr("10.9.1.7")))
	rs, err := h.Routes("d0")
	if err != nil {
		t.Fatal(err)
	}
	var dsts []string
	for _, r := range rs {
		if r.Dst.Addr().Is4() {
			dsts = append(dsts, r.Dst.String())
		}
	}
	if !slices.Equal(dsts, []string{"10.9.1.7/32"}) {
		t.Errorf("routes of d0 = %v, want only 10.9.1.7/32 in IPv4 (no subnet route)", rs)
	}
}

// nic makes nic0 in h, an Ethernet device to put devices on (one end of a
// veth pair).
func nic(t *testing.T, h *netops.Handle) {
	t.Helper()
	_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "nic0", PeerName: "nic0p", Peer: h})
	must(t, err)
}
