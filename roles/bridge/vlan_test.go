package bridge_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// nodeNS is a path to the node's namespace (set by TestMain).
var nodeNS = "/proc/self/ns/net"

func openNode(t *testing.T) *netops.Handle {
	t.Helper()
	h, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// requireVlans skips the test when the kernel has no bridge VLAN filtering
// or no 802.1Q interfaces.
func requireVlans(t *testing.T) {
	t.Helper()
	h := openNode(t)
	_, err := h.EnsureBridge(netops.BridgeOpts{Name: "brprobe", VlanFiltering: true})
	defer h.DeleteLink("brprobe")
	nstest.SkipIfKernelLacks(t, "bridge VLAN filtering", err)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.EnsureBridgeVlanLink("brprobe", 9)
	nstest.SkipIfKernelLacks(t, "802.1Q VLAN interfaces (8021q)", err)
	if err != nil {
		t.Fatal(err)
	}
}

// vlanConf is a bridge network on brv: extra is more fields, rangeStart
// keeps the networks' addresses apart in 10.10.0.0/24.
func vlanConf(name, extra, rangeStart string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":"brv",%s
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.10.0.0/24","rangeStart":%q,"gateway":"10.10.0.1"}]]}}`, name, extra, rangeStart))
}

func podAddr(t *testing.T, out []byte) netip.Addr {
	t.Helper()
	r := roletest.Result(t, out, "1.0.0")
	a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
	return a
}

func portVlans(t *testing.T, h *netops.Handle, p roletest.Pod) []netops.PortVlan {
	t.Helper()
	v, err := h.PortVlans(bridge.HostVethName(p.ID, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVlanGateway: pods on VLAN 10 with isGateway reach each other and
// their gateway, which is on brv.10; a pod on VLAN 20 of the same bridge and
// subnet reaches neither; DEL (twice) removes the pods' ports.
func TestVlanGateway(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	requireVlans(t)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brv.10"); host.DeleteLink("brv") })
	c10 := vlanConf("v10", `"isGateway":true,"vlan":10,`, "10.10.0.10")
	c20 := vlanConf("v20", `"vlan":20,`, "10.10.0.100")
	a, b, o := n.NewPod("va"), n.NewPod("vb"), n.NewPod("vo")
	ipa := podAddr(t, n.Must(bridge.Role, "ADD", a, c10))
	ipb := podAddr(t, n.Must(bridge.Role, "ADD", b, c10))
	ipo := podAddr(t, n.Must(bridge.Role, "ADD", o, c20))

	gw := netip.MustParseAddr("10.10.0.1")
	addrs, err := host.Addrs("brv.10")
	if err != nil {
		t.Fatalf("gateway interface: %v", err)
	}
	if !slices.Contains(addrs, netip.PrefixFrom(gw, 24)) {
		t.Errorf("brv.10 addresses = %v, want 10.10.0.1/24", addrs)
	}
	if got, want := portVlans(t, host, a), []netops.PortVlan{{VID: 10, PVID: true, Untagged: true}}; !slices.Equal(got, want) {
		t.Errorf("port vlans of pod a = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		what     string
		from, to string
		ip       netip.Addr
		want     bool
	}{
		{"a to gateway", a.Netns, nodeNS, gw, true},
		{"b to gateway", b.Netns, nodeNS, gw, true},
		{"a to b", a.Netns, b.Netns, ipb, true},
		{"b to a", b.Netns, a.Netns, ipa, true},
		{"vlan 20 to a", o.Netns, a.Netns, ipa, false},
		{"vlan 20 to gateway", o.Netns, nodeNS, gw, false},
		{"a to vlan 20", a.Netns, o.Netns, ipo, false},
	} {
		if err := nstest.Probe(t, tc.from, tc.to, tc.ip, tc.want); (err == nil) != tc.want {
			t.Errorf("%s (%s): reachable = %v (%v), want %v", tc.what, tc.ip, err == nil, err, tc.want)
		}
	}

	n.Must(bridge.Role, "CHECK", a, roletest.WithPrev(t, c10, n.Must(bridge.Role, "ADD", a, c10)))
	for _, p := range []struct {
		pod  roletest.Pod
		conf []byte
	}{{a, c10}, {b, c10}, {o, c20}} {
		n.Must(bridge.Role, "DEL", p.pod, p.conf)
		n.Must(bridge.Role, "DEL", p.pod, p.conf)
		if _, err := host.LinkByName(bridge.HostVethName(p.pod.ID, "eth0")); err == nil {
			t.Errorf("host veth of %s left after DEL", p.pod.ID)
		}
	}
	n.Empty("v10")
	n.Empty("v20")
}

// TestVlanTrunkAndDefault: vlanTrunk puts its VIDs on the port tagged, and
// preserveDefaultVlan keeps VID 1 on a port with vlan.
func TestVlanTrunkAndDefault(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	requireVlans(t)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brv") })
	trunk := `"vlanTrunk":[{"id":5},{"minID":7,"maxID":8}],`
	for _, tc := range []struct {
		name, extra string
		want        []netops.PortVlan
	}{
		{"trunk", trunk, []netops.PortVlan{{VID: 1, PVID: true, Untagged: true}, {VID: 5}, {VID: 7}, {VID: 8}}},
		{"trunk with vlan", trunk + `"vlan":10,`, []netops.PortVlan{{VID: 5}, {VID: 7}, {VID: 8}, {VID: 10, PVID: true, Untagged: true}}},
		{"vlan", `"vlan":10,`, []netops.PortVlan{{VID: 10, PVID: true, Untagged: true}}},
		{"vlan preserving vid 1", `"vlan":10,"preserveDefaultVlan":true,`, []netops.PortVlan{{VID: 1, Untagged: true}, {VID: 10, PVID: true, Untagged: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := vlanConf("vt", tc.extra, "10.10.0.10")
			p := n.NewPod("vt")
			n.Must(bridge.Role, "ADD", p, c)
			if got := portVlans(t, host, p); !slices.Equal(got, tc.want) {
				t.Errorf("port vlans = %+v, want %+v", got, tc.want)
			}
			n.Must(bridge.Role, "DEL", p, c)
			n.Must(bridge.Role, "DEL", p, c)
			n.Empty("vt")
		})
	}
}
