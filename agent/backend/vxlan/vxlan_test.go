package vxlan

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/agent/backend/backendtest"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

// TestDeviceMTUs: Backend.MTU is flannel's (the wire's); the devices get
// 50 bytes less over IPv4 and 70 over IPv6.
func TestDeviceMTUs(t *testing.T) {
	for _, tc := range []struct {
		mtu, under   int
		v6           bool
		want4, want6 int
		err          string
	}{
		{0, 1500, false, 1450, 1430, ""},
		{1400, 1500, false, 1350, 1330, ""},
		{9000, 1500, true, 8950, 8930, ""}, // the operator's MTU wins over the interface's, as flanneld
		{0, 1500, true, 1450, 1430, ""},
		{1340, 1500, true, 0, 0, "below IPv6's minimum of 1280"},
		{0, 100, false, 0, 0, "use at least 118"},
	} {
		cfg := &netconf.Config{EnableIPv4: true, EnableIPv6: tc.v6, Backend: netconf.Backend{MTU: tc.mtu}}
		m4, m6, err := DeviceMTUs(cfg, tc.under)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("MTU %d under %d: %v, want %q", tc.mtu, tc.under, err, tc.err)
			}
			continue
		}
		if err != nil || m4 != tc.want4 || m6 != tc.want6 {
			t.Errorf("MTU %d under %d: %d %d %v, want %d %d", tc.mtu, tc.under, m4, m6, err, tc.want4, tc.want6)
		}
	}
}

const dualConf = `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan", "DirectRouting": %v}}`

// start makes and starts the backend of each node and has each program
// the other.
func start(t *testing.T, nodes [2]*backendtest.Node) [2]*Backend {
	t.Helper()
	var bs [2]*Backend
	for i, n := range nodes {
		b, err := New(n.Env)
		backendtest.Must(t, err)
		bs[i] = b
		n.Start(t, b)
	}
	backendtest.Must(t, bs[0].Add(nodes[0].H, nodes[1].Lease, nil))
	backendtest.Must(t, bs[1].Add(nodes[1].H, nodes[0].Lease, nil))
	return bs
}

// TestVXLANTwoNodes: on dual stack, flannel.1 and flannel-v6.1 on the
// underlay with MTUs 1450 and 1430 and the subnets' first addresses; the
// lease publishes the VNI and each device's MAC; a peer is a permanent
// neighbour, an FDB entry and an onlink route per family (with
// DirectRouting, in each family a plain route via its public IP on the
// underlay), both
// ways reachable in both families; stale entries go with a sync, a removed
// peer's at once.
func TestVXLANTwoNodes(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "tunnel", true: "direct"}[direct], func(t *testing.T) {
			nodes := backendtest.TwoNodes(t, fmt.Sprintf(dualConf, direct))
			bs := start(t, nodes)
			n1, n2 := nodes[0], nodes[1]
			if got := bs[0].Devices(); len(got) != 2 || got[0] != "flannel.1" || got[1] != "flannel-v6.1" {
				t.Errorf("Devices() = %v; want flannel.1 flannel-v6.1", got)
			}
			for _, d := range []struct {
				name string
				mtu  int
				addr string
				vtep net.HardwareAddr
				peer netip.Prefix
				gw   netip.Addr
				via  string
			}{
				{"flannel.1", 1450, "10.244.1.0/32", n1.Lease.Attrs.VTEPMAC, n2.Lease.Subnet, n2.Lease.Subnet.Addr(), "192.168.78.2"},
				{"flannel-v6.1", 1430, "fd00:10:244:1::/128", n1.Lease.Attrs.VTEPMAC6, n2.Lease.Subnet6, n2.Lease.Subnet6.Addr(), "fd00:78::2"},
			} {
				v, err := n1.H.VXLANByName(d.name)
				backendtest.Must(t, err)
				if v.VNI != 1 || v.MTU != d.mtu || !v.Up || !bytes.Equal(v.MAC, d.vtep) {
					t.Errorf("%s: vni %d mtu %d up %v mac %s; want 1, %d, up, the published %s", d.name, v.VNI, v.MTU, v.Up, v.MAC, d.mtu, d.vtep)
				}
				addrs, err := n1.H.Addrs(d.name)
				backendtest.Must(t, err)
				if !slices.Contains(addrs, netip.MustParsePrefix(d.addr)) {
					t.Errorf("%s addresses %v; want %s", d.name, addrs, d.addr)
				}
				want := netops.Route{Dst: d.peer, GW: d.gw, Dev: d.name, Onlink: true}
				if direct {
					want = netops.Route{Dst: d.peer, GW: netip.MustParseAddr(d.via), Dev: "eth0"}
				}
				all, err := n1.H.Routes("")
				backendtest.Must(t, err)
				if !backendtest.HasRoute(all, want) {
					t.Errorf("routes %v; want %s", all, want)
				}
			}
			if n1.Lease.Attrs.BackendType != "vxlan" || n1.Lease.Attrs.VNI != 1 || len(n1.Lease.Attrs.VTEPMAC) != 6 || len(n1.Lease.Attrs.VTEPMAC6) != 6 {
				t.Errorf("published %+v; want vxlan, VNI 1 and a VTEP MAC per family", n1.Lease.Attrs)
			}
			if got := bs[0].Direct(n2.Lease); got != direct {
				t.Errorf("Direct(peer) = %v; want %v", got, direct)
			}
			for _, pair := range [][2]*backendtest.Node{{n1, n2}, {n2, n1}} {
				for _, a := range []netip.Addr{pair[1].Lease.Subnet.Addr(), pair[1].Lease.Subnet6.Addr()} {
					if err := backendtest.Reachable(t, pair[0], pair[1], a); err != nil {
						t.Fatalf("to %s: %v", a, err)
					}
				}
			}

			// Stale entries on the IPv4 device go with a sync; the peer's stay.
			staleMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 9}
			staleGW := netip.MustParseAddr("10.244.9.0")
			backendtest.Must(t, n1.H.EnsureNeigh("flannel.1", staleGW, staleMAC))
			backendtest.Must(t, n1.H.EnsureFDB("flannel.1", staleMAC, netip.MustParseAddr("192.168.78.9")))
			backendtest.Must(t, n1.H.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.244.9.0/24"), GW: staleGW, Dev: "flannel.1", Onlink: true}))
			removed, added, err := bs[0].Sync(n1.H, []lease.Lease{n2.Lease})
			if err != nil || removed != 3 || added != 0 {
				t.Errorf("Sync = removed %d added %d %v; want the stale neighbour, FDB entry and route removed", removed, added, err)
			}
			if removed, added, err := bs[0].Sync(n1.H, []lease.Lease{n2.Lease}); err != nil || removed+added != 0 {
				t.Errorf("a second Sync = removed %d added %d %v; want nothing to do", removed, added, err)
			}

			backendtest.Must(t, bs[0].Remove(n1.H, n2.Lease))
			all, err := n1.H.Routes("")
			backendtest.Must(t, err)
			for _, r := range all {
				if r.Dst == n2.Lease.Subnet || r.Dst == n2.Lease.Subnet6 {
					t.Errorf("the route %s is still there after Remove", r)
				}
			}
			fdb, err := n1.H.FDB("flannel.1")
			backendtest.Must(t, err)
			for _, e := range fdb {
				if e.Permanent && bytes.Equal(e.MAC, n2.Lease.Attrs.VTEPMAC) {
					t.Errorf("the FDB entry %s is still there after Remove", e)
				}
			}
		})
	}
}

// TestVXLANKeepsMAC: the VTEP MAC survives a restart: a device still there
// keeps its own over what Resume offers; a device gone is made again with
// the MAC this node published before, the first one offered that has one;
// and a device deleted under a running backend comes back with its MAC.
func TestVXLANKeepsMAC(t *testing.T) {
	nodes := backendtest.TwoNodes(t, fmt.Sprintf(dualConf, false))
	n := nodes[0]
	first, err := New(n.Env)
	backendtest.Must(t, err)
	n.Start(t, first)
	mac4, mac6 := n.Lease.Attrs.VTEPMAC, n.Lease.Attrs.VTEPMAC6
	other := lease.Attrs{VTEPMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 4}, VTEPMAC6: net.HardwareAddr{0x02, 0, 0, 0, 0, 6}}

	published := func(b *Backend) lease.Attrs {
		var at lease.Attrs
		b.Publish(&at)
		return at
	}
	again, err := New(n.Env)
	backendtest.Must(t, err)
	again.Resume(other)
	backendtest.Must(t, again.Prepare(n.H))
	if at := published(again); !bytes.Equal(at.VTEPMAC, mac4) || !bytes.Equal(at.VTEPMAC6, mac6) {
		t.Errorf("devices kept: published %s %s; want their own %s %s", at.VTEPMAC, at.VTEPMAC6, mac4, mac6)
	}

	for _, d := range first.Devices() {
		backendtest.Must(t, n.H.DeleteLink(d))
	}
	restarted, err := New(n.Env)
	backendtest.Must(t, err)
	restarted.Resume(lease.Attrs{}, lease.Attrs{VTEPMAC: mac4, VTEPMAC6: mac6}, other)
	backendtest.Must(t, restarted.Prepare(n.H))
	for _, d := range []struct {
		name string
		mac  net.HardwareAddr
	}{{"flannel.1", mac4}, {"flannel-v6.1", mac6}} {
		v, err := n.H.VXLANByName(d.name)
		backendtest.Must(t, err)
		if !bytes.Equal(v.MAC, d.mac) {
			t.Errorf("%s made again with MAC %s; want the published %s", d.name, v.MAC, d.mac)
		}
	}

	backendtest.Must(t, n.H.DeleteLink("flannel.1"))
	backendtest.Must(t, restarted.Prepare(n.H))
	if v, err := n.H.VXLANByName("flannel.1"); err != nil || !bytes.Equal(v.MAC, mac4) {
		t.Errorf("flannel.1 repaired: %v, MAC %s; want %s", err, v.MAC, mac4)
	}
}
