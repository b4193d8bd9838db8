package vrf_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vrf"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// conf is a vrf config with prevResult naming ifname in the pod, plus fields.
func conf(t *testing.T, p roletest.Pod, ifname, addr string, fields map[string]any) []byte {
	idx := 0
	ip, ipn, _ := net.ParseCIDR(addr)
	ipn.IP = ip
	prev := &current.Result{CNIVersion: "1.0.0", Interfaces: []*current.Interface{{Name: ifname, Sandbox: p.Netns}},
		IPs: []*current.IPConfig{{Interface: &idx, Address: *ipn}}}
	b, err := json.Marshal(prev)
	must(t, err)
	all := map[string]any{"prevResult": json.RawMessage(b)}
	for k, v := range fields {
		all[k] = v
	}
	return roletest.With(t, []byte(`{"cniVersion":"1.0.0","name":"vrfnet","type":"vrf"}`), all)
}

// TestShareAndDelete: two interfaces of a pod in one VRF (created by the
// first ADD, with a free table), their routes in its table; DEL of the
// first keeps the VRF, DEL of the second deletes it; DELs twice.
func TestShareAndDelete(t *testing.T) {
	n := roletest.NewNode(t, vrf.Role)
	p := n.NewPod("vrf")
	peer := nstest.NewNS(t, "vrfpeer")
	ph, pod := roletest.Open(t, peer), roletest.Open(t, p.Netns)
	for _, v := range []struct{ peer, dev, addr string }{{"p0", "eth0", "10.62.1.2/24"}, {"p1", "net1", "10.62.2.2/24"}} {
		_, _, err := ph.EnsureVeth(netops.VethOpts{HostName: v.peer, PeerName: v.dev, Peer: pod})
		must(t, err)
		must(t, pod.EnsureAddr(v.dev, netip.MustParsePrefix(v.addr), netops.AddrOpts{}))
	}
	must(t, pod.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.0.0/16"), GW: netip.MustParseAddr("10.62.1.1"), Dev: "eth0"}))

	c0 := conf(t, p, "eth0", "10.62.1.2/24", map[string]any{"vrfname": "blue"})
	c1 := conf(t, p, "net1", "10.62.2.2/24", map[string]any{"vrfname": "blue"})
	out, err := n.Call(vrf.Role, "ADD", p, c0)
	if err != nil {
		_, kerr := pod.EnsureVRF("cbxprobe", 0)
		nstest.SkipIfKernelLacks(t, "VRF devices (vrf module)", kerr)
		t.Fatal(err)
	}
	if r := roletest.Result(t, out, "1.0.0"); len(r.IPs) != 1 {
		t.Errorf("ADD result %s, want prevResult passed through", out)
	}
	n.Must(vrf.Role, "ADD", p, c0) // repeated: nothing changes
	n.Must(vrf.Role, "ADD", p, c1, "CNI_IFNAME", "net1")
	table, err := pod.VRF("blue")
	must(t, err)
	if table != 1 {
		t.Errorf("VRF table %d, want 1 (the first free one)", table)
	}
	members, err := pod.VRFMembers("blue")
	must(t, err)
	slices.Sort(members)
	if !slices.Equal(members, []string{"eth0", "net1"}) {
		t.Errorf("VRF members %v, want eth0 and net1", members)
	}
	main, err := pod.Routes("eth0")
	must(t, err)
	for _, r := range main {
		if r.Dst == netip.MustParsePrefix("10.99.0.0/16") {
			t.Errorf("route %s still in the main table", r)
		}
	}
	in, err := pod.TableRoutes("eth0", int(table))
	must(t, err)
	if got := fmt.Sprint(in); !strings.Contains(got, "10.99.0.0/16 via 10.62.1.1 dev eth0") || !strings.Contains(got, "10.62.1.0/24 dev eth0") {
		t.Errorf("VRF table: %s, want eth0's moved and connected routes", got)
	}
	n.Must(vrf.Role, "CHECK", p, c0)
	n.Must(vrf.Role, "CHECK", p, c1, "CNI_IFNAME", "net1")
	if _, err := n.Call(vrf.Role, "CHECK", p, conf(t, p, "eth0", "10.62.1.2/24", map[string]any{"vrfname": "blue", "table": 7})); err == nil {
		t.Error("CHECK with another table succeeded")
	}
	if _, err := n.Call(vrf.Role, "ADD", p, conf(t, p, "eth0", "10.62.1.2/24", map[string]any{"vrfname": "blue", "table": 7})); roletest.Code(err) != 7 {
		t.Errorf("ADD to the VRF with another table: %v, want code 7", err)
	}

	for i := 0; i < 2; i++ {
		n.Must(vrf.Role, "DEL", p, c0)
	}
	if _, err := pod.VRF("blue"); err != nil {
		t.Fatalf("VRF gone with an interface still in it: %v", err)
	}
	if _, err := n.Call(vrf.Role, "CHECK", p, c0); err == nil {
		t.Error("CHECK of eth0 after its DEL succeeded")
	}
	for i := 0; i < 2; i++ {
		n.Must(vrf.Role, "DEL", p, c1, "CNI_IFNAME", "net1")
	}
	if _, err := pod.VRF("blue"); err == nil {
		t.Error("VRF still there after the DEL of its last interface")
	}
}

// TestFixedTable: a VRF made with the configured table.
func TestFixedTable(t *testing.T) {
	n := roletest.NewNode(t, vrf.Role)
	p := n.NewPod("vrft")
	peer := nstest.NewNS(t, "vrfpeer")
	ph, pod := roletest.Open(t, peer), roletest.Open(t, p.Netns)
	_, _, err := ph.EnsureVeth(netops.VethOpts{HostName: "p0", PeerName: "eth0", Peer: pod})
	must(t, err)
	c := conf(t, p, "eth0", "10.62.1.2/24", map[string]any{"vrfname": "red", "table": 1001})
	if _, err := n.Call(vrf.Role, "ADD", p, c); err != nil {
		_, kerr := pod.EnsureVRF("cbxprobe", 0)
		nstest.SkipIfKernelLacks(t, "VRF devices (vrf module)", kerr)
		t.Fatal(err)
	}
	if table, err := pod.VRF("red"); err != nil || table != 1001 {
		t.Errorf("VRF table %d (%v), want 1001", table, err)
	}
	n.Must(vrf.Role, "DEL", p, c)
}

// TestDelGone: DEL with the namespace gone, or no VRF, succeeds.
func TestDelGone(t *testing.T) {
	n := roletest.NewNode(t, vrf.Role)
	gone := roletest.Pod{ID: "gone", Netns: "/run/netns/cbx-vrf-no-such-ns"}
	c := []byte(`{"cniVersion":"1.0.0","name":"vrfnet","type":"vrf","vrfname":"blue"}`)
	n.Must(vrf.Role, "DEL", gone, c)
	n.Must(vrf.Role, "DEL", n.NewPod("vrfnone"), c)
}

func TestConfErrors(t *testing.T) {
	n := roletest.NewNode(t, vrf.Role)
	p := n.NewPod("vrfconf")
	for _, tc := range []struct {
		name   string
		fields map[string]any
		code   uint
	}{
		{"no vrfname", map[string]any{}, 7},
		{"long vrfname", map[string]any{"vrfname": "a-very-long-vrf-name"}, 7},
		{"slash", map[string]any{"vrfname": "a/b"}, 7},
		{"local table", map[string]any{"vrfname": "blue", "table": 255}, 7},
		{"negative table", map[string]any{"vrfname": "blue", "table": -3}, 7},
		{"table not a number", map[string]any{"vrfname": "blue", "table": "x"}, 6},
		{"no prevResult", map[string]any{"vrfname": "blue"}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := roletest.With(t, []byte(`{"cniVersion":"1.0.0","name":"vrfnet","type":"vrf"}`), tc.fields)
			_, err := n.Call(vrf.Role, "ADD", p, c)
			if got := roletest.Code(err); got != tc.code {
				t.Errorf("code %d (%v), want %d", got, err, tc.code)
			}
		})
	}
}
