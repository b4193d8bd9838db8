package netops_test

import (
	"errors"
	"net"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestEnsureTap: a tap is made in the handle's namespace (not the
// caller's), down, with the MTU, MAC, owner, group, queue mode and master
// asked for; a second call keeps it; a device of another kind by that name
// is ErrExists; DeleteLink removes it, twice.
func TestEnsureTap(t *testing.T) {
	h := openNS(t, "tap")
	_, err := h.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	owner, group := uint32(1000), uint32(100)
	mac, _ := net.ParseMAC("0a:00:00:00:00:07")
	tp, err := h.EnsureTap(netops.TapOpts{Name: "eth0", MTU: 1400, MAC: mac, MultiQueue: true, Owner: &owner, Group: &group, Master: "br0"})
	nstest.SkipIfKernelLacks(t, "TUN/TAP (tun)", err)
	if err != nil {
		t.Fatal(err)
	}
	br, _ := h.LinkByName("br0")
	if tp.Kind != "tun" || !tp.IsTap || tp.Up || tp.MTU != 1400 || tp.MAC.String() != mac.String() || !tp.MultiQueue || !tp.Persist ||
		tp.Owner == nil || *tp.Owner != owner || tp.Group == nil || *tp.Group != group || tp.MasterIndex != br.Index {
		t.Errorf("created %+v; want a down persistent multi-queue tap, mtu 1400, MAC %s, owner %d, group %d, on br0", tp, mac, owner, group)
	}
	host, err := netops.Open("")
	must(t, err)
	defer host.Close()
	if _, err := host.LinkByName("eth0"); err == nil {
		if l, _ := host.LinkByName("eth0"); l.Index == tp.Index && l.Kind == "tun" {
			t.Error("the tap was made in the caller's namespace")
		}
	}
	if again, err := h.EnsureTap(netops.TapOpts{Name: "eth0"}); err != nil || again.Index != tp.Index {
		t.Errorf("second EnsureTap = %+v, %v; want the same device", again, err)
	}
	nic(t, h)
	if _, err := h.EnsureTap(netops.TapOpts{Name: "nic0"}); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureTap over a veth = %v, want ErrExists", err)
	}
	if _, err := h.EnsureTap(netops.TapOpts{Name: "tap1", Master: "nope0"}); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("EnsureTap on a missing master = %v, want ErrNotFound", err)
	}
	if _, err := h.LinkByName("tap1"); err == nil {
		t.Error("a refused EnsureTap left tap1")
	}
	must(t, h.DeleteLink("eth0"))
	must(t, h.DeleteLink("eth0"))
	if _, err := h.LinkByName("eth0"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("eth0 after DeleteLink: %v, want ErrNotFound", err)
	}
}

// TestEnsureTapPlain: without owner, group or multi-queue the tap has none
// of them, and the kernel's MTU and a MAC of its own.
func TestEnsureTapPlain(t *testing.T) {
	h := openNS(t, "tap")
	tp, err := h.EnsureTap(netops.TapOpts{Name: "tap0"})
	nstest.SkipIfKernelLacks(t, "TUN/TAP (tun)", err)
	if err != nil {
		t.Fatal(err)
	}
	if !tp.IsTap || tp.MultiQueue || tp.Owner != nil || tp.Group != nil || tp.MTU != 1500 || len(tp.MAC) != 6 || tp.MasterIndex != 0 {
		t.Errorf("created %+v; want a single-queue tap without owner or group, mtu 1500", tp)
	}
}
