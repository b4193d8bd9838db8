package hostdevice

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestAddCheckDel runs ADD, CHECK, DEL and DEL again at every spec version,
// single and dual stack: the node's device is the pod's eth0 (its MAC, its
// node name as alias, up, IPAM's addresses and routes, reaching the LAN),
// the node no longer has it, and DEL gives it back as it was.
func TestAddCheckDel(t *testing.T) {
	for _, v := range roletest.Versions {
		for name, ranges := range map[string]string{"v4": v4, "dual": dual} {
			t.Run(v+"/"+name, func(t *testing.T) {
				n := newNode(t)
				st := newDevice(t, "dev0")
				p := n.NewPod("hd")
				c := netConf(v, `,"device":"dev0"`, ranges)
				out := n.Must(Role, "ADD", p, c)
				res := roletest.Result(t, out, v)
				if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Sandbox != p.Netns || res.Interfaces[0].Mac != st.MAC.String() {
					t.Fatalf("interfaces = %+v, want eth0 in the pod with MAC %s", res.Interfaces, st.MAC)
				}
				pod := roletest.Open(t, p.Netns)
				l, err := pod.LinkByName("eth0")
				if err != nil || l.Kind != "veth" || !l.Up || l.MAC.String() != st.MAC.String() {
					t.Fatalf("pod's eth0 = %+v, %v; want the up device", l, err)
				}
				if alias, _ := pod.LinkAlias("eth0"); alias != "dev0" {
					t.Errorf("alias of the pod's eth0 = %q, want dev0", alias)
				}
				if _, err := roletest.Open(t, "").LinkByName("dev0"); err == nil {
					t.Error("the node still has dev0")
				}
				addrs, _ := pod.Addrs("eth0")
				for _, ipc := range res.IPs {
					if pfx := attach.PrefixOf(ipc.Address); ipc.Interface == nil || *ipc.Interface != 0 || !slices.Contains(addrs, pfx) {
						t.Errorf("address %s (interface %v) not on the pod's eth0 %v", pfx, ipc.Interface, addrs)
					}
				}
				if slices.Contains(addrs, nodeAddr) {
					t.Errorf("the node's own address %s went into the pod", nodeAddr)
				}
				routes, _ := pod.Routes("eth0")
				if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst.String() == "192.168.62.0/24" && r.GW == lanHost }) {
					t.Errorf("route 192.168.62.0/24 via %s missing in %v", lanHost, routes)
				}
				if _, err := pod.Ping(lanHost, 3*time.Second); err != nil {
					t.Errorf("the pod cannot reach the LAN host through the device: %v", err)
				}
				eps := n.Endpoints("hdnet")
				if len(eps) != 1 || eps[0].Plugin != "host-device" || eps[0].MAC != st.MAC.String() || eps[0].Extra["device"] != "dev0" ||
					eps[0].Extra["mtu"] != "1400" || eps[0].Extra["up"] != "true" || eps[0].Extra["addrs"] != nodeAddr.String() {
					t.Errorf("endpoint records = %+v", eps)
				}
				if v >= "0.4.0" {
					n.Must(Role, "CHECK", p, roletest.WithPrev(t, c, out))
				}
				for range 2 {
					n.Must(Role, "DEL", p, c)
				}
				if _, err := pod.LinkByName("eth0"); err == nil {
					t.Error("the pod's eth0 is still there after DEL")
				}
				backAsItWas(t, st)
				n.Empty("hdnet")
			})
		}
	}
}

// TestL2: without IPAM the device is only moved and up; CHECK passes; DEL
// gives it back.
func TestL2(t *testing.T) {
	n := newNode(t)
	st := newDevice(t, "dev0")
	p := n.NewPod("l2")
	c := []byte(`{"cniVersion":"1.1.0","name":"hdnet","type":"host-device","device":"dev0"}`)
	out := n.Must(Role, "ADD", p, c)
	if res := roletest.Result(t, out, "1.1.0"); len(res.IPs) != 0 || len(res.Interfaces) != 1 {
		t.Errorf("result = %+v", res)
	}
	if l, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err != nil || !l.Up {
		t.Errorf("eth0 = %+v, %v; want up", l, err)
	}
	n.Must(Role, "CHECK", p, roletest.WithPrev(t, c, out))
	n.Must(Role, "DEL", p, c)
	backAsItWas(t, st)
	n.Empty("hdnet")
}

// TestInUse: a device another attachment holds is refused with code 7
// naming it and the holder: when it is in that pod (named by its name or
// its MAC), and when its record holds it but it is still on the node (an
// ADD that died before the move).
func TestInUse(t *testing.T) {
	n := newNode(t)
	st := newDevice(t, "dev0")
	a, b := n.NewPod("a"), n.NewPod("b")
	c := netConf("1.0.0", `,"device":"dev0"`, v4)
	n.Must(Role, "ADD", a, c)
	for _, extra := range []string{`,"device":"dev0"`, `,"hwaddr":"` + st.MAC.String() + `"`} {
		_, err := n.Call(Role, "ADD", b, netConf("1.0.0", extra, v4))
		if roletest.Code(err) != 7 || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), a.ID) {
			t.Errorf("ADD of a device in use (%s): %v; want code 7 naming the holder %s", extra, err, a.ID)
		}
	}
	// As if a's ADD had died before the move: the device on the node, a's
	// record holding it.
	if _, err := roletest.Open(t, a.Netns).MoveLink(netops.MoveOpts{Name: "eth0", Into: roletest.Open(t, ""), NewName: "dev0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(Role, "ADD", b, c); roletest.Code(err) != 7 || !strings.Contains(err.Error(), a.ID) {
		t.Errorf("ADD of a device a record holds: %v; want code 7 naming %s", err, a.ID)
	}
	if _, err := roletest.Open(t, b.Netns).LinkByName("eth0"); err == nil {
		t.Error("a refused ADD moved the device")
	}
	n.Must(Role, "DEL", a, c)
	n.Must(Role, "ADD", b, c)
	n.Must(Role, "DEL", b, c)
	backAsItWas(t, st)
	n.Empty("hdnet")
}

// TestUndo: an ADD that fails after the move (an IPAM route whose gateway
// no route reaches) gives the device back as it was and leaves no record
// or reservation.
func TestUndo(t *testing.T) {
	n := newNode(t)
	st := newDevice(t, "dev0")
	p := n.NewPod("undo")
	c := []byte(`{"cniVersion":"1.0.0","name":"hdnet","type":"host-device","device":"dev0",
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.62.0.0/24"}]],"routes":[{"dst":"192.168.0.0/16","gw":"172.31.0.1"}]}}`)
	_, err := n.Call(Role, "ADD", p, c)
	if roletest.Code(err) != 5 || !strings.Contains(err.Error(), "192.168.0.0/16") {
		t.Errorf("ADD with an unreachable route gateway: %v, want code 5 naming the route", err)
	}
	if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is left after a failed ADD")
	}
	backAsItWas(t, st)
	n.Empty("hdnet")
}

// TestDelNetnsGone: with the pod's namespace gone, a virtual stand-in (a
// veth) went with it, as the kernel destroys virtual devices with their
// namespace (a physical one it gives back to the initial namespace): DEL
// succeeds twice and leaves no record or address.
func TestDelNetnsGone(t *testing.T) {
	n := newNode(t)
	newDevice(t, "dev0")
	p := n.NewPod("gone")
	c := netConf("1.0.0", `,"device":"dev0"`, dual)
	n.Must(Role, "ADD", p, c)
	name := strings.TrimPrefix(p.Netns, "/run/netns/")
	if err := netops.DeleteNamedNS(name); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		n.Must(Role, "DEL", p, c)
	}
	if _, err := netops.CreateNamedNS(name); err != nil { // for the test's cleanup
		t.Fatal(err)
	}
	n.Empty("hdnet")
}

// TestDelReturnedByKernel: a device already back on the node under another
// name with its alias (what the kernel does with a physical device when
// the pod's namespace goes) is found by its alias and restored.
func TestDelReturnedByKernel(t *testing.T) {
	n := newNode(t)
	st := newDevice(t, "dev0")
	p := n.NewPod("back")
	c := netConf("1.0.0", `,"device":"dev0"`, v4)
	n.Must(Role, "ADD", p, c)
	if _, err := roletest.Open(t, p.Netns).MoveLink(netops.MoveOpts{Name: "eth0", Into: roletest.Open(t, ""), NewName: "dev7"}); err != nil {
		t.Fatal(err)
	}
	n.Must(Role, "DEL", p, c)
	backAsItWas(t, st)
	n.Empty("hdnet")
}

// TestDelNameTaken: DEL while the node has another interface of the
// device's name fails with code 5 saying so and keeps the record; once the
// name is free DEL gives the device back.
func TestDelNameTaken(t *testing.T) {
	n := newNode(t)
	st := newDevice(t, "dev0")
	p := n.NewPod("taken")
	c := netConf("1.0.0", `,"device":"dev0"`, v4)
	n.Must(Role, "ADD", p, c)
	host := roletest.Open(t, "")
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "dev0", PeerName: "dev0p", Peer: host}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(Role, "DEL", p, c); roletest.Code(err) != 5 || !strings.Contains(err.Error(), "another interface") {
		t.Errorf("DEL with dev0 taken: %v, want code 5 saying so", err)
	}
	if eps := n.Endpoints("hdnet"); len(eps) != 1 {
		t.Errorf("records after a failed DEL: %+v", eps)
	}
	if err := host.DeleteLink("dev0"); err != nil {
		t.Fatal(err)
	}
	n.Must(Role, "DEL", p, c)
	backAsItWas(t, st)
	n.Empty("hdnet")
}

// TestDelReferenceAlias: an attachment without a record (the reference
// made it) is given back by the device's alias.
func TestDelReferenceAlias(t *testing.T) {
	n := newNode(t)
	newDevice(t, "dev0")
	p := n.NewPod("ref")
	alias := "dev0"
	if _, err := roletest.Open(t, "").MoveLink(netops.MoveOpts{Name: "dev0", Into: roletest.Open(t, p.Netns), NewName: "eth0", Alias: &alias}); err != nil {
		t.Fatal(err)
	}
	n.Must(Role, "DEL", p, []byte(`{"cniVersion":"1.0.0","name":"hdnet","type":"host-device","device":"dev0"}`))
	if l, err := roletest.Open(t, "").LinkByName("dev0"); err != nil {
		t.Errorf("dev0 not back on the node: %+v, %v", l, err)
	}
}

// TestGC: GC keeps the valid attachment and gives back the other's device;
// STATUS is ready.
func TestGC(t *testing.T) {
	n := newNode(t)
	newDevice(t, "dev0")
	st1 := newDevice(t, "dev1")
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	n.Must(Role, "ADD", keep, netConf("1.1.0", `,"device":"dev0"`, v4))
	n.Must(Role, "ADD", drop, netConf("1.1.0", `,"device":"dev1"`, v4))
	c := netConf("1.1.0", `,"device":"dev0"`, v4)
	n.Must(Role, "GC", keep, roletest.WithKeep(t, c, keep))
	if _, err := roletest.Open(t, keep.Netns).LinkByName("eth0"); err != nil {
		t.Errorf("GC took the kept pod's device: %v", err)
	}
	backAsItWas(t, st1)
	if rs := n.Reservations("hdnet"); len(rs) != 1 || rs[0].ContainerID != keep.ID {
		t.Errorf("reservations after GC: %+v", rs)
	}
	n.Must(Role, "STATUS", keep, c)
	n.Must(Role, "DEL", keep, c)
	n.Empty("hdnet")
}

// TestCheckFails: CHECK notices a missing address and another MAC on
// CNI_IFNAME (not the device the ADD moved).
func TestCheckFails(t *testing.T) {
	n := newNode(t)
	newDevice(t, "dev0")
	p := n.NewPod("chk")
	c := netConf("1.0.0", `,"device":"dev0"`, v4)
	out := n.Must(Role, "ADD", p, c)
	pod := roletest.Open(t, p.Netns)
	res := roletest.Result(t, out, "1.0.0")
	if err := pod.DeleteAddr("eth0", attach.PrefixOf(res.IPs[0].Address)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("CHECK without the address: %v, want an error saying it is missing", err)
	}
	if err := pod.SetMAC("eth0", netops.RandomMAC()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "MAC") {
		t.Errorf("CHECK of another MAC: %v, want an error naming the MAC", err)
	}
	n.Must(Role, "DEL", p, c)
	n.Empty("hdnet")
}
