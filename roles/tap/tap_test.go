package tap_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/tap"
)

var gw4 = netip.MustParseAddr("10.61.0.1")

func newNode(t *testing.T) *roletest.Node { return roletest.NewNode(t, tap.Role, hostlocal.Role) }

var open = roletest.Open

// requireTap skips the test on a kernel without TUN/TAP.
func requireTap(t *testing.T) {
	t.Helper()
	_, err := open(t, nstest.NewNS(t, "probe")).EnsureTap(netops.TapOpts{Name: "probe0"})
	nstest.SkipIfKernelLacks(t, "TUN/TAP (tun)", err)
	if err != nil {
		t.Fatal(err)
	}
}

// conf is a tap network; ranges is host-local's "ranges" JSON, extra more
// top-level fields (starting with a comma).
func conf(v, ranges, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"tapnet","type":"tap"%s,
		"ipam":{"type":"host-local","ranges":%s,"routes":[{"dst":"192.168.61.0/24"}]}}`, v, extra, ranges))
}

const (
	v4   = `[[{"subnet":"10.61.0.0/24","rangeStart":"10.61.0.10","gateway":"10.61.0.1"}]]`
	dual = `[[{"subnet":"10.61.0.0/24","rangeStart":"10.61.0.10","gateway":"10.61.0.1"}],[{"subnet":"fd61::/64","rangeStart":"fd61::10","gateway":"fd61::1"}]]`
)

// TestAddCheckDel runs ADD, CHECK, DEL and DEL again at every spec version,
// single and dual stack: the pod gets an up, single-queue tap without owner
// or group, the kernel's MTU, the result's MAC, IPAM's addresses and
// routes, and nothing is left after DEL.
func TestAddCheckDel(t *testing.T) {
	for _, v := range roletest.Versions {
		for name, ranges := range map[string]string{"v4": v4, "dual": dual} {
			t.Run(v+"/"+name, func(t *testing.T) {
				requireTap(t)
				n := newNode(t)
				p := n.NewPod("tap")
				c := conf(v, ranges, "")
				out := n.Must(tap.Role, "ADD", p, c)
				res := roletest.Result(t, out, v)
				roletest.PodEth0(t, res, p)
				pod := open(t, p.Netns)
				tp, err := pod.TapByName("eth0")
				if err != nil || !tp.IsTap || !tp.Up || tp.MTU != 1500 || tp.MultiQueue || tp.Owner != nil || tp.Group != nil || tp.MAC.String() != res.Interfaces[0].Mac {
					t.Fatalf("pod's eth0 = %+v, %v; want an up single-queue tap without owner or group, mtu 1500, MAC %s", tp, err, res.Interfaces[0].Mac)
				}
				roletest.AddrsOnEth0(t, pod, res)
				if want := map[string]int{"v4": 1, "dual": 2}[name]; len(res.IPs) != want {
					t.Errorf("result IPs = %v, want %d", res.IPs, want)
				}
				roletest.RouteOnEth0(t, pod, "192.168.61.0/24", gw4)
				if eps := n.Endpoints("tapnet"); len(eps) != 1 || eps[0].Plugin != "tap" || eps[0].MAC != tp.MAC.String() || len(eps[0].IPs) != len(res.IPs) {
					t.Errorf("endpoint records = %+v", eps)
				}
				n.CheckDelTwice(tap.Role, p, c, out, v, "tapnet")
			})
		}
	}
}

// TestOptions: mtu, mac, multiQueue, owner and group end up on the tap and
// CHECK holds them; CHECK notices a changed MTU and a tap that is down.
func TestOptions(t *testing.T) {
	requireTap(t)
	n := newNode(t)
	p := n.NewPod("opts")
	c := conf("1.1.0", v4, `,"mtu":1400,"mac":"0a:00:00:00:61:01","multiQueue":true,"owner":1000,"group":0`)
	out := n.Must(tap.Role, "ADD", p, c)
	pod := open(t, p.Netns)
	tp, err := pod.TapByName("eth0")
	if err != nil || tp.MTU != 1400 || tp.MAC.String() != "0a:00:00:00:61:01" || !tp.MultiQueue || tp.Owner == nil || *tp.Owner != 1000 || tp.Group == nil || *tp.Group != 0 {
		t.Fatalf("eth0 = %+v, %v", tp, err)
	}
	if eps := n.Endpoints("tapnet"); len(eps) != 1 || eps[0].Extra["owner"] != "1000" || eps[0].Extra["group"] != "0" || eps[0].Extra["multiQueue"] != "true" {
		t.Errorf("endpoint records = %+v", eps)
	}
	n.Must(tap.Role, "CHECK", p, roletest.WithPrev(t, c, out))
	other := conf("1.1.0", v4, `,"mtu":1400,"mac":"0a:00:00:00:61:01","multiQueue":true,"owner":1001,"group":0`)
	if _, err := n.Call(tap.Role, "CHECK", p, roletest.WithPrev(t, other, out)); err == nil || !strings.Contains(err.Error(), "owner") {
		t.Errorf("CHECK with another owner: %v, want an error naming owner", err)
	}
	if err := pod.SetMTU("eth0", 1300); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(tap.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "MTU") {
		t.Errorf("CHECK with MTU 1300: %v, want an error naming the MTU", err)
	}
	if err := pod.SetLinkDown("eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(tap.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "down") {
		t.Errorf("CHECK of a tap that is down: %v, want an error saying so", err)
	}
	n.Must(tap.Role, "DEL", p, c)
	n.Empty("tapnet")
}

// TestMACSources: CNI_ARGS MAC=, args.cni.mac and runtimeConfig.mac
// override the config's mac, in that order.
func TestMACSources(t *testing.T) {
	requireTap(t)
	n := newNode(t)
	p := n.NewPod("mac")
	c := conf("1.0.0", v4, `,"mac":"0a:00:00:00:61:01","runtimeConfig":{"mac":"0a:00:00:00:61:04"}`)
	res := roletest.Result(t, n.Must(tap.Role, "ADD", p, c, "CNI_ARGS", "IgnoreUnknown=1;MAC=0a:00:00:00:61:02"), "1.0.0")
	if res.Interfaces[0].Mac != "0a:00:00:00:61:04" {
		t.Errorf("MAC = %s, want runtimeConfig's", res.Interfaces[0].Mac)
	}
	n.Must(tap.Role, "DEL", p, c)
	n.Empty("tapnet")
}

// TestBridgeL2: without IPAM and with "bridge" the tap is an up port of
// the pod's bridge without addresses; DEL keeps the bridge.
func TestBridgeL2(t *testing.T) {
	requireTap(t)
	n := newNode(t)
	p := n.NewPod("br")
	pod := open(t, p.Netns)
	br, err := pod.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	if err != nil {
		t.Fatal(err)
	}
	c := []byte(`{"cniVersion":"1.0.0","name":"tapnet","type":"tap","bridge":"br0"}`)
	out := n.Must(tap.Role, "ADD", p, c)
	if res := roletest.Result(t, out, "1.0.0"); len(res.IPs) != 0 || len(res.Interfaces) != 1 {
		t.Errorf("result = %+v", res)
	}
	tp, err := pod.TapByName("eth0")
	if err != nil || !tp.Up || tp.MasterIndex != br.Index {
		t.Errorf("eth0 = %+v, %v; want an up port of br0", tp, err)
	}
	if addrs, _ := pod.Addrs("eth0"); len(addrs) != 0 {
		t.Errorf("addresses on an L2 tap: %v", addrs)
	}
	n.Must(tap.Role, "CHECK", p, roletest.WithPrev(t, c, out))
	for range 2 {
		n.Must(tap.Role, "DEL", p, c)
	}
	if _, err := pod.LinkByName("br0"); err != nil {
		t.Errorf("the pod's bridge is gone: %v", err)
	}
	n.Empty("tapnet")
}

// TestBadInput: bad input gets the code of its kind and a message naming
// the field, before any kernel work; nothing is left.
func TestBadInput(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("bad")
	pod := open(t, p.Netns)
	if _, _, err := pod.EnsureVeth(netops.VethOpts{HostName: "v0", PeerName: "v1", Peer: pod}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, conf string
		code       uint
		says       string
	}{
		{"mtu", string(conf("1.0.0", v4, `,"mtu":65522`)), 7, `"mtu"`},
		{"owner", string(conf("1.0.0", v4, `,"owner":-1`)), 7, `"owner"`},
		{"group", string(conf("1.0.0", v4, `,"group":4294967295`)), 7, `"group"`},
		{"mac", string(conf("1.0.0", v4, `,"mac":"01:00:5e:00:00:01"`)), 7, `"mac"`},
		{"selinuxContext", string(conf("1.0.0", v4, `,"selinuxContext":"nonsense"`)), 7, `"selinuxContext"`},
		{"bridge name", string(conf("1.0.0", v4, `,"bridge":"a/b"`)), 7, `"bridge"`},
		{"bridge missing", string(conf("1.0.0", v4, `,"bridge":"br9"`)), 7, `"bridge"`},
		{"bridge not a bridge", string(conf("1.0.0", v4, `,"bridge":"v0"`)), 7, `"bridge"`},
		{"mode", string(conf("1.0.0", v4, `,"mode":"l2"`)), 2, `"mode"`},
		{"broken JSON", `{"cniVersion":"1.0.0","name":"tapnet","type":"tap",`, 6, ""},
		{"owner type", string(conf("1.0.0", v4, `,"owner":"root"`)), 6, `config field "owner"`},
		{"spec version 0.2.0", string(conf("0.2.0", v4, "")), 1, ""},
		{"bad subnet", string(conf("1.0.0", `[[{"subnet":"10.61.0.0/33"}]]`, "")), 7, "subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Call(tap.Role, "ADD", p, []byte(tc.conf))
			if roletest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ADD: code %d, %v; want code %d saying %s", roletest.Code(err), err, tc.code, tc.says)
			}
		})
	}
	if _, err := n.Call(tap.Role, "ADD", p, conf("1.0.0", v4, ""), "CNI_NETNS", "/run/netns/no-such-pod"); roletest.Code(err) != 3 {
		t.Errorf("ADD into a missing netns: %v, want code 3", err)
	}
	if _, err := pod.LinkByName("eth0"); err == nil {
		t.Error("a refused ADD left eth0 in the pod")
	}
	if err := pod.SetLinkDown("v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(tap.Role, "ADD", p, conf("1.0.0", v4, ""), "CNI_IFNAME", "v1"); roletest.Code(err) != 101 {
		t.Errorf("ADD over an existing v1: %v, want code 101", err)
	}
	n.Empty("tapnet")
}

// TestUndo: an ADD that fails after the tap (an IPAM route whose gateway no
// route reaches) leaves no tap, record or reservation.
func TestUndo(t *testing.T) {
	requireTap(t)
	n := newNode(t)
	p := n.NewPod("undo")
	c := []byte(`{"cniVersion":"1.0.0","name":"tapnet","type":"tap",
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.61.0.0/24"}]],"routes":[{"dst":"192.168.0.0/16","gw":"172.31.0.1"}]}}`)
	err := n.FailedAdd(tap.Role, p, c, "tapnet")
	if !strings.Contains(err.Error(), "192.168.0.0/16") || roletest.Code(err) != 5 {
		t.Errorf("ADD with an unreachable route gateway: %v, want code 5 naming the route", err)
	}
}

// TestDelNetnsGone: DEL works (twice) once the pod's namespace is gone.
func TestDelNetnsGone(t *testing.T) {
	requireTap(t)
	n := newNode(t)
	p := n.NewPod("gone")
	c := conf("1.0.0", dual, "")
	n.Must(tap.Role, "ADD", p, c)
	n.DelNetnsGone(tap.Role, p, c, "tapnet")
}

// TestGC: GC keeps the valid attachments and removes the others' tap,
// record and address; STATUS is ready.
func TestGC(t *testing.T) {
	requireTap(t)
	n := newNode(t)
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	c := conf("1.1.0", v4, "")
	n.Must(tap.Role, "ADD", keep, c)
	n.Must(tap.Role, "ADD", drop, c)
	n.GCKeeps(tap.Role, keep, drop, c, "tapnet")
}
