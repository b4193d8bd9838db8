package netops_test

import (
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestOpenMissingNamespace(t *testing.T) {
	nstest.RequireRoot(t)
	_, err := netops.Open("/run/netns/cnibox-test-does-not-exist")
	if !errors.Is(err, netops.ErrNotFound) {
		t.Fatalf("Open(missing) = %v, want ErrNotFound", err)
	}
}

func TestLinkByNameMissing(t *testing.T) {
	h := openNS(t, "lbn")
	if _, err := h.LinkByName("nope0"); !errors.Is(err, netops.ErrNotFound) {
		t.Fatalf("LinkByName(nope0) = %v, want ErrNotFound", err)
	}
	lo, err := h.LinkByName("lo")
	if err != nil || !lo.Up || lo.Index != 1 {
		t.Fatalf("LinkByName(lo) = %+v, %v; want index 1, up", lo, err)
	}
	links, err := h.Links()
	links = ownLinks(links)
	if err != nil || len(links) != 1 || links[0].Name != "lo" {
		t.Fatalf("Links() = %+v, %v; want only lo", links, err)
	}
}

func TestEnsureBridge(t *testing.T) {
	h := openNS(t, "br")
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0xbb, 0x01}
	tests := []struct {
		name string
		opts netops.BridgeOpts
	}{
		{"plain", netops.BridgeOpts{Name: "br0"}},
		{"options", netops.BridgeOpts{Name: "br1", MTU: 1400, MAC: mac, PromiscMode: true}},
		{"vlan filtering", netops.BridgeOpts{Name: "br3", VlanFiltering: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, err := h.EnsureBridge(tt.opts)
			nstest.SkipIfKernelLacks(t, "bridge VLAN filtering", err)
			must(t, err)
			second, err := h.EnsureBridge(tt.opts)
			must(t, err)
			if first.Index != second.Index {
				t.Errorf("second EnsureBridge returned index %d, first %d", second.Index, first.Index)
			}
			got, err := h.LinkByName(tt.opts.Name)
			must(t, err)
			if got.Kind != "bridge" || !got.Up || got.Index != first.Index {
				t.Errorf("bridge = %+v, want an up bridge with index %d", got, first.Index)
			}
			if tt.opts.MTU != 0 && got.MTU != tt.opts.MTU {
				t.Errorf("MTU = %d, want %d", got.MTU, tt.opts.MTU)
			}
			if tt.opts.MAC != nil && got.MAC.String() != tt.opts.MAC.String() {
				t.Errorf("MAC = %s, want %s", got.MAC, tt.opts.MAC)
			}
			if got.Promisc != tt.opts.PromiscMode || got.VlanFiltering != tt.opts.VlanFiltering {
				t.Errorf("promisc %v vlan_filtering %v, want %v %v", got.Promisc, got.VlanFiltering, tt.opts.PromiscMode, tt.opts.VlanFiltering)
			}
			if first.Promisc != got.Promisc || first.VlanFiltering != got.VlanFiltering || first.MTU != got.MTU {
				t.Errorf("EnsureBridge returned %+v, kernel has %+v", first, got)
			}
		})
	}

	t.Run("fixes an existing bridge", func(t *testing.T) {
		_, err := h.EnsureBridge(netops.BridgeOpts{Name: "br2"})
		must(t, err)
		must(t, h.SetLinkDown("br2"))
		l, err := h.EnsureBridge(netops.BridgeOpts{Name: "br2", PromiscMode: true})
		must(t, err)
		got, err := h.LinkByName("br2")
		must(t, err)
		if !got.Up || !got.Promisc || !l.Up || !l.Promisc {
			t.Errorf("after EnsureBridge: returned %+v, kernel %+v; want up, promisc", l, got)
		}
		l, err = h.EnsureBridge(netops.BridgeOpts{Name: "br2", VlanFiltering: true})
		nstest.SkipIfKernelLacks(t, "bridge VLAN filtering", err)
		must(t, err)
		if got, err = h.LinkByName("br2"); err != nil || !got.VlanFiltering || !l.VlanFiltering {
			t.Errorf("after EnsureBridge: returned %+v, kernel %+v, %v; want vlan_filtering", l, got, err)
		}
	})

	t.Run("name taken by a veth", func(t *testing.T) {
		_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "notbr", PeerName: "notbr-p", Peer: h})
		must(t, err)
		_, err = h.EnsureBridge(netops.BridgeOpts{Name: "notbr"})
		if !errors.Is(err, netops.ErrExists) {
			t.Fatalf("EnsureBridge(notbr) = %v, want ErrExists", err)
		}
	})
}

func TestEnsureVeth(t *testing.T) {
	host := openNS(t, "vh")
	pod := openNS(t, "vp")
	br, err := host.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	peerMAC := net.HardwareAddr{0x02, 0x42, 0, 0, 0, 0x01}
	opts := netops.VethOpts{HostName: "vethA", PeerName: "eth0", Peer: pod, Master: "br0", MTU: 1400, PeerMAC: peerMAC, TxQLen: 500}

	hostL, peerL, err := host.EnsureVeth(opts)
	must(t, err)
	checkPair := func(t *testing.T, hostL, peerL netops.Link) {
		t.Helper()
		gotHost, err := host.LinkByName("vethA")
		must(t, err)
		gotPeer, err := pod.LinkByName("eth0")
		must(t, err)
		if gotHost.Kind != "veth" || !gotHost.Up || gotHost.MasterIndex != br.Index || gotHost.MTU != 1400 {
			t.Errorf("host end = %+v, want an up veth enslaved to %d with MTU 1400", gotHost, br.Index)
		}
		if gotPeer.Kind != "veth" || !gotPeer.Up || gotPeer.MTU != 1400 || gotPeer.MAC.String() != peerMAC.String() {
			t.Errorf("peer = %+v, want an up veth with MTU 1400 and MAC %s", gotPeer, peerMAC)
		}
		if gotHost.PeerIndex != gotPeer.Index || gotPeer.PeerIndex != gotHost.Index {
			t.Errorf("host %+v and peer %+v are not each other's peer", gotHost, gotPeer)
		}
		if hostL.Index != gotHost.Index || hostL.MasterIndex != gotHost.MasterIndex || hostL.MAC.String() != gotHost.MAC.String() || !hostL.Up {
			t.Errorf("EnsureVeth returned host %+v, kernel has %+v", hostL, gotHost)
		}
		if peerL.Index != gotPeer.Index || peerL.MAC.String() != gotPeer.MAC.String() || peerL.MTU != gotPeer.MTU || !peerL.Up || peerL.PeerIndex != gotHost.Index {
			t.Errorf("EnsureVeth returned peer %+v, kernel has %+v", peerL, gotPeer)
		}
		if _, err := host.LinkByName("eth0"); !errors.Is(err, netops.ErrNotFound) {
			t.Errorf("eth0 in the host namespace: %v, want ErrNotFound", err)
		}
	}
	checkPair(t, hostL, peerL)

	t.Run("idempotent", func(t *testing.T) {
		must(t, host.SetLinkDown("vethA"))
		must(t, pod.SetLinkDown("eth0"))
		h2, p2, err := host.EnsureVeth(opts)
		must(t, err)
		if h2.Index != hostL.Index || p2.Index != peerL.Index {
			t.Fatalf("second EnsureVeth made a new pair: %+v %+v, first %+v %+v", h2, p2, hostL, peerL)
		}
		checkPair(t, h2, p2)
	})

	t.Run("peer name taken", func(t *testing.T) {
		o := opts
		o.HostName = "vethB"
		_, _, err := host.EnsureVeth(o)
		if !errors.Is(err, netops.ErrExists) {
			t.Fatalf("EnsureVeth(vethB -> eth0) = %v, want ErrExists", err)
		}
		if !strings.Contains(err.Error(), `"eth0"`) || !strings.Contains(err.Error(), pod.Path()) {
			t.Errorf("error %q does not name eth0 and %s", err, pod.Path())
		}
		if _, err := host.LinkByName("vethB"); !errors.Is(err, netops.ErrNotFound) {
			t.Errorf("vethB left behind: %v", err)
		}
	})

	t.Run("host name taken by a bridge", func(t *testing.T) {
		o := opts
		o.HostName, o.PeerName = "br0", "eth1"
		if _, _, err := host.EnsureVeth(o); !errors.Is(err, netops.ErrExists) {
			t.Fatalf("EnsureVeth(br0) = %v, want ErrExists", err)
		}
	})

	t.Run("stale host end is replaced", func(t *testing.T) {
		oldPod := openNS(t, "vo")
		newPod := openNS(t, "vn")
		o := netops.VethOpts{HostName: "vethS", PeerName: "eth0", Peer: oldPod, MasterIndex: br.Index}
		old, _, err := host.EnsureVeth(o)
		must(t, err)
		o.Peer = newPod
		h2, p2, err := host.EnsureVeth(o)
		must(t, err)
		if h2.Index == old.Index {
			t.Errorf("host end was not recreated (index %d)", h2.Index)
		}
		if _, err := oldPod.LinkByName("eth0"); !errors.Is(err, netops.ErrNotFound) {
			t.Errorf("old peer still exists: %v", err)
		}
		got, err := newPod.LinkByName("eth0")
		must(t, err)
		if got.Index != p2.Index || !got.Up || h2.MasterIndex != br.Index {
			t.Errorf("new peer %+v (returned %+v), host %+v", got, p2, h2)
		}
	})

	t.Run("delete twice", func(t *testing.T) {
		must(t, host.DeleteLink("vethA"))
		must(t, host.DeleteLink("vethA"))
		if _, err := pod.LinkByName("eth0"); !errors.Is(err, netops.ErrNotFound) {
			t.Errorf("peer survived deleting the host end: %v", err)
		}
	})
}

func TestSetLink(t *testing.T) {
	h := openNS(t, "sl")
	_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "a0", PeerName: "b0", Peer: h})
	must(t, err)
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x42}
	must(t, h.SetMTU("a0", 1280))
	must(t, h.SetMAC("a0", mac))
	must(t, h.SetPromisc("a0", true))
	must(t, h.SetLinkUp("b0"))
	a, err := h.LinkByName("a0")
	must(t, err)
	b, err := h.LinkByName("b0")
	must(t, err)
	if a.MTU != 1280 || a.MAC.String() != mac.String() || !a.Promisc || !b.Up {
		t.Errorf("a0 = %+v, b0 = %+v", a, b)
	}
	must(t, h.SetPromisc("a0", false))
	if a, _ = h.LinkByName("a0"); a.Promisc {
		t.Errorf("promisc still on: %+v", a)
	}
	for name, err := range map[string]error{
		"SetLinkUp": h.SetLinkUp("nope0"),
		"SetMTU":    h.SetMTU("nope0", 1400),
	} {
		if !errors.Is(err, netops.ErrNotFound) {
			t.Errorf("%s(missing) = %v, want ErrNotFound", name, err)
		}
	}
	links, err := h.Links()
	must(t, err)
	var names []string
	for _, l := range ownLinks(links) {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a0", "b0", "lo"}) {
		t.Errorf("Links() names = %v", names)
	}
}

func TestHairpin(t *testing.T) {
	host := openNS(t, "hp")
	pod := openNS(t, "hpp")
	_, err := host.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	_, _, err = host.EnsureVeth(netops.VethOpts{HostName: "vethH", PeerName: "eth0", Peer: pod, Master: "br0"})
	must(t, err)
	for _, on := range []bool{true, true, false, false} {
		must(t, host.SetHairpin("vethH", on))
		l, err := host.LinkByName("vethH")
		must(t, err)
		if l.Hairpin != on {
			t.Errorf("after SetHairpin(%v): Hairpin = %v", on, l.Hairpin)
		}
	}
	if err := host.SetHairpin("nope0", true); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("SetHairpin(missing) = %v, want ErrNotFound", err)
	}
}

func TestPortVlan(t *testing.T) {
	host := openNS(t, "pv")
	pod := openNS(t, "pvp")
	_, err := host.EnsureBridge(netops.BridgeOpts{Name: "br0", VlanFiltering: true})
	nstest.SkipIfKernelLacks(t, "bridge VLAN filtering", err)
	must(t, err)
	_, _, err = host.EnsureVeth(netops.VethOpts{HostName: "vethV", PeerName: "eth0", Peer: pod, Master: "br0"})
	must(t, err)

	for _, vid := range []int{100, 100, 200} {
		must(t, host.SetPortVlans("vethV", netops.PortVlanOpts{Access: vid}))
		vlans, err := host.PortVlans("vethV")
		must(t, err)
		want := []netops.PortVlan{{VID: vid, PVID: true, Untagged: true}}
		if vid == 200 {
			// SetPortVlans adds; the earlier VID stays untagged, not the PVID.
			want = []netops.PortVlan{{VID: 100, PVID: false, Untagged: true}, {VID: 200, PVID: true, Untagged: true}}
		}
		if !slices.Equal(vlans, want) {
			t.Errorf("after SetPortVlans(%d): vlans = %+v, want %+v", vid, vlans, want)
		}
	}
	if err := host.SetPortVlans("vethV", netops.PortVlanOpts{Access: 4095}); err == nil {
		t.Error("SetPortVlans(4095) succeeded")
	}
}

// TestBridgeVlanLink: the bridge's VLAN interface is an 802.1Q link on the
// bridge, up, made once, with the bridge a tagged member of the VID.
func TestBridgeVlanLink(t *testing.T) {
	host := openNS(t, "bvl")
	_, err := host.EnsureBridge(netops.BridgeOpts{Name: "br0", VlanFiltering: true})
	nstest.SkipIfKernelLacks(t, "bridge VLAN filtering", err)
	must(t, err)
	for range 2 {
		name, err := host.EnsureBridgeVlanLink("br0", 10)
		nstest.SkipIfKernelLacks(t, "802.1Q VLAN interfaces (8021q)", err)
		must(t, err)
		if name != "br0.10" {
			t.Errorf("name = %q, want br0.10", name)
		}
	}
	vlans, err := host.PortVlans("br0")
	must(t, err)
	if !slices.Contains(vlans, netops.PortVlan{VID: 10}) {
		t.Errorf("bridge's own vlans = %+v, want VID 10 tagged", vlans)
	}
	if _, err := host.EnsureBridgeVlanLink("br0", 4095); err == nil {
		t.Error("EnsureBridgeVlanLink(4095) succeeded")
	}
}

// A bridge keeps the MAC it was created with as ports come and go: one
// created without a MAC would take its lowest port's and change when that
// port leaves, and neighbours that cached the old one would lose it.
func TestEnsureBridgeKeepsMAC(t *testing.T) {
	h := openNS(t, "brmac")
	br, err := h.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	if len(br.MAC) != 6 || br.MAC[0]&1 != 0 {
		t.Fatalf("bridge MAC %s: want a unicast MAC", br.MAC)
	}
	// ports whose MACs are below and above any the bridge could have
	for i, mac := range []net.HardwareAddr{{0, 0, 0, 0, 0, 1}, {0xfe, 0xff, 0xff, 0xff, 0xff, 0xfe}} {
		name := "port" + string(rune('0'+i))
		_, _, err := h.EnsureVeth(netops.VethOpts{HostName: name, PeerName: name + "p", Peer: h, Master: "br0", HostMAC: mac})
		must(t, err)
	}
	for _, step := range []string{"ports added", "port0 removed"} {
		if step == "port0 removed" {
			must(t, h.DeleteLink("port0"))
		}
		got, err := h.LinkByName("br0")
		must(t, err)
		if got.MAC.String() != br.MAC.String() {
			t.Errorf("%s: bridge MAC %s, want %s as created", step, got.MAC, br.MAC)
		}
	}
}
