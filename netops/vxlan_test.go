package netops_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// underlay gives the namespace of h an interface with an address to carry
// VXLAN traffic.
func underlay(t *testing.T, h *netops.Handle, name, addr string) {
	t.Helper()
	_, err := h.EnsureBridge(netops.BridgeOpts{Name: name})
	must(t, err)
	must(t, h.EnsureAddr(name, netip.MustParsePrefix(addr), netops.AddrOpts{}))
}

func TestEnsureVXLAN(t *testing.T) {
	h := openNS(t, "vx")
	underlay(t, h, "under0", "192.0.2.1/24")
	mac := net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}
	o := netops.VXLANOpts{
		Name: "flannel.1", VNI: 1, Local: netip.MustParseAddr("192.0.2.1"), Dev: "under0",
		MTU: 1450, MAC: mac, TxChecksumOff: true,
	}
	v, created, err := h.EnsureVXLAN(o)
	must(t, err)
	if !created {
		t.Error("first EnsureVXLAN: created = false")
	}
	under, err := h.LinkByName("under0")
	must(t, err)
	if v.VNI != 1 || v.Port != netops.DefaultVXLANPort || v.Local != o.Local || v.DevIndex != under.Index ||
		v.Learning || v.GBP || v.MTU != 1450 || v.MAC.String() != mac.String() || !v.Up {
		t.Errorf("EnsureVXLAN = %+v; want vni 1, port 8472, local 192.0.2.1, dev under0, nolearning, mtu 1450, mac %s, up", v, mac)
	}
	if on, err := h.TxChecksum("flannel.1"); err != nil || on {
		t.Errorf("TxChecksum = %v, %v; want off", on, err)
	}

	// The same settings again: nothing changes.
	again, created, err := h.EnsureVXLAN(o)
	must(t, err)
	if created || again.Index != v.Index {
		t.Errorf("second EnsureVXLAN: created %v, index %d (was %d); want the same device", created, again.Index, v.Index)
	}

	// MTU and MAC change in place; a down device comes up.
	must(t, h.SetLinkDown("flannel.1"))
	o2 := o
	o2.MTU, o2.MAC = 1400, net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 2}
	v2, created, err := h.EnsureVXLAN(o2)
	must(t, err)
	got, err := h.VXLANByName("flannel.1")
	must(t, err)
	if created || got.Index != v.Index || got.MTU != 1400 || got.MAC.String() != o2.MAC.String() || !got.Up || !v2.Up {
		t.Errorf("after MTU/MAC change: %+v (created %v); want same index %d, mtu 1400, mac %s, up", got, created, v.Index, o2.MAC)
	}

	// Another VNI, port and GBP: the device is built again and keeps its MAC.
	o3 := o
	o3.MAC, o3.VNI, o3.Port, o3.GBP = nil, 7, 4789, true
	v3, created, err := h.EnsureVXLAN(o3)
	must(t, err)
	if !created || v3.VNI != 7 || v3.Port != 4789 || !v3.GBP || v3.MAC.String() != o2.MAC.String() || !v3.Up {
		t.Errorf("after VNI change: %+v (created %v); want re-created, vni 7, port 4789, gbp, mac %s kept", v3, created, o2.MAC)
	}

	// A link of that name that is not a vxlan device is not replaced.
	_, err = h.EnsureBridge(netops.BridgeOpts{Name: "notvx"})
	must(t, err)
	o4 := o
	o4.Name = "notvx"
	if _, _, err := h.EnsureVXLAN(o4); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureVXLAN over a bridge = %v, want ErrExists", err)
	}
	if _, err := h.VXLANByName("nope0"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("VXLANByName(missing) = %v, want ErrNotFound", err)
	}
}

// TestOverlayPeer programs one remote node the way flannel does and reads it
// back: route via the peer's .0 onlink, permanent neighbour, FDB entry.
func TestOverlayPeer(t *testing.T) {
	h := openNS(t, "vxp")
	underlay(t, h, "under0", "172.17.8.101/24")
	_, _, err := h.EnsureVXLAN(netops.VXLANOpts{Name: "flannel.1", VNI: 1, Local: netip.MustParseAddr("172.17.8.101"), Dev: "under0"})
	must(t, err)
	must(t, h.EnsureAddr("flannel.1", netip.MustParsePrefix("10.244.0.0/32"), netops.AddrOpts{}))

	peerMAC, _ := net.ParseMAC("ee:8a:1f:f7:96:c7")
	gw := netip.MustParseAddr("10.244.2.0")
	public := netip.MustParseAddr("172.17.8.103")
	route := netops.Route{Dst: netip.MustParsePrefix("10.244.2.0/24"), GW: gw, Dev: "flannel.1", Onlink: true}
	for range 2 {
		must(t, h.EnsureNeigh("flannel.1", gw, peerMAC))
		must(t, h.EnsureFDB("flannel.1", peerMAC, public))
		must(t, h.EnsureRoute(route))
	}

	neighs, err := unicastNeighs(h, "flannel.1")
	must(t, err)
	if len(neighs) != 1 || neighs[0].IP != gw || neighs[0].MAC.String() != peerMAC.String() || !neighs[0].Permanent {
		t.Errorf("Neighs = %v; want 10.244.2.0 lladdr %s PERMANENT", neighs, peerMAC)
	}
	fdb, err := h.FDB("flannel.1")
	must(t, err)
	if len(fdb) != 1 || fdb[0].Dst != public || fdb[0].MAC.String() != peerMAC.String() || !fdb[0].Permanent {
		t.Errorf("FDB = %v; want %s dst %s self permanent", fdb, peerMAC, public)
	}
	routes, err := v4Routes(h, "flannel.1")
	must(t, err)
	if len(routes) != 1 || routes[0].Dst != route.Dst || routes[0].GW != gw || !routes[0].Onlink {
		t.Errorf("Routes = %v; want %s", routes, route)
	}

	// The peer moves to another public IP: the entry is replaced, not added.
	moved := netip.MustParseAddr("172.17.8.104")
	must(t, h.EnsureFDB("flannel.1", peerMAC, moved))
	fdb, err = h.FDB("flannel.1")
	must(t, err)
	if len(fdb) != 1 || fdb[0].Dst != moved {
		t.Errorf("FDB after move = %v; want only %s dst %s", fdb, peerMAC, moved)
	}
	// The peer changes its MAC: the neighbour is replaced in place.
	newMAC := net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 9}
	must(t, h.EnsureNeigh("flannel.1", gw, newMAC))
	neighs, err = unicastNeighs(h, "flannel.1")
	must(t, err)
	if len(neighs) != 1 || neighs[0].MAC.String() != newMAC.String() {
		t.Errorf("Neighs after MAC change = %v; want only lladdr %s", neighs, newMAC)
	}

	// Removal, twice; a missing device is no error either.
	for range 2 {
		must(t, h.DeleteRoute(route))
		must(t, h.DeleteNeigh("flannel.1", gw))
		must(t, h.DeleteFDB("flannel.1", peerMAC, moved))
	}
	must(t, h.EnsureFDB("flannel.1", peerMAC, public))
	must(t, h.DeleteFDB("flannel.1", peerMAC, netip.Addr{})) // any destination
	if fdb, err = h.FDB("flannel.1"); err != nil || len(fdb) != 0 {
		t.Errorf("FDB after delete = %v, %v; want empty", fdb, err)
	}
	if neighs, err = unicastNeighs(h, "flannel.1"); err != nil || len(neighs) != 0 {
		t.Errorf("Neighs after delete = %v, %v; want empty", neighs, err)
	}
	if routes, err = v4Routes(h, "flannel.1"); err != nil || len(routes) != 0 {
		t.Errorf("Routes after delete = %v, %v; want empty", routes, err)
	}
	must(t, h.DeleteLink("flannel.1"))
	must(t, h.DeleteNeigh("flannel.1", gw))
	must(t, h.DeleteFDB("flannel.1", peerMAC, public))
}

// v4Routes returns the IPv4 routes of dev (the kernel adds fe80::/64 itself).
func v4Routes(h *netops.Handle, dev string) ([]netops.Route, error) {
	all, err := h.Routes(dev)
	var out []netops.Route
	for _, r := range all {
		if r.Dst.Addr().Is4() {
			out = append(out, r)
		}
	}
	return out, err
}

func TestOverlayMasq(t *testing.T) {
	h := openNS(t, "ovm")
	nets := []nft.OverlayMasqNet{{Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.1.0/24")}}
	for range 2 {
		if _, err := h.NFT().EnsureOverlayMasq(nets, nft.OverlayMasqOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := h.NFT().OverlayMasq()
	must(t, err)
	if len(rules) != 5 || !strings.Contains(rules[3], "10.244.1.0/24") {
		t.Fatalf("OverlayMasq = %q; want 5 rules, the 4th for the local subnet 10.244.1.0/24", rules)
	}
	// A new lease replaces the rules.
	nets[0].Subnet = netip.MustParsePrefix("10.244.7.0/24")
	nets = append(nets, nft.OverlayMasqNet{Network: netip.MustParsePrefix("fd00:10::/56"), Subnet: netip.MustParsePrefix("fd00:10:0:7::/64")})
	if _, err := h.NFT().EnsureOverlayMasq(nets, nft.OverlayMasqOpts{}); err != nil {
		t.Fatal(err)
	}
	rules, err = h.NFT().OverlayMasq()
	must(t, err)
	if len(rules) != 10 || !strings.Contains(rules[3], "10.244.7.0/24") || !strings.Contains(rules[8], "fd00:10:0:7::/64") {
		t.Fatalf("OverlayMasq after change = %q; want 10 rules for the new subnets", rules)
	}
	for range 2 {
		must(t, h.NFT().DeleteOverlayMasq())
	}
	if rules, err = h.NFT().OverlayMasq(); err != nil || rules != nil {
		t.Fatalf("OverlayMasq after delete = %q, %v; want none", rules, err)
	}
}

func TestWatchLinks(t *testing.T) {
	h := openNS(t, "wl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := h.WatchLinks(ctx, nil)
	must(t, err)
	_, _, err = h.EnsureVXLAN(netops.VXLANOpts{Name: "vx0", VNI: 3})
	must(t, err)
	must(t, h.DeleteLink("vx0"))
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Name == "vx0" && ev.Deleted {
				return
			}
		case <-timeout:
			t.Fatal("no deletion event for vx0")
		}
	}
}

func TestWatchRoutes(t *testing.T) {
	h := openNS(t, "wr")
	underlay(t, h, "under0", "192.0.2.1/24")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := h.WatchRoutes(ctx, nil)
	must(t, err)
	r := netops.Route{Dst: netip.MustParsePrefix("10.9.0.0/24"), GW: netip.MustParseAddr("192.0.2.9"), Dev: "under0"}
	must(t, h.EnsureRoute(r))
	must(t, h.DeleteRoute(r))
	var added, deleted bool
	timeout := time.After(10 * time.Second)
	for !added || !deleted {
		select {
		case ev := <-events:
			if ev.Dst == r.Dst {
				added = added || !ev.Deleted
				deleted = deleted || (added && ev.Deleted)
			}
		case <-timeout:
			t.Fatalf("route events: added %v, deleted %v", added, deleted)
		}
	}
}

// unicastNeighs is the device's neighbours without the multicast entries the
// kernel adds itself (Linux 6.1 puts ff02::16 on a new VXLAN device).
func unicastNeighs(h *netops.Handle, dev string) ([]netops.Neigh, error) {
	all, err := h.Neighs(dev)
	var out []netops.Neigh
	for _, n := range all {
		if !n.IP.IsMulticast() {
			out = append(out, n)
		}
	}
	return out, err
}
