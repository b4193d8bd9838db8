package vlan_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vlan"
)

// TestAddCheckDel runs ADD, CHECK, DEL and DEL again at every spec version,
// single and dual stack, with the master taken from the node's default
// route: the pod gets VLAN 42 of lan0 with the MTU, addresses and routes,
// reaches the LAN host on that VLAN, and nothing but the master is left
// after DEL.
func TestAddCheckDel(t *testing.T) {
	for _, v := range roletest.Versions {
		for name, ranges := range map[string]string{"v4": v4, "dual": dual} {
			t.Run(v+"/"+name, func(t *testing.T) {
				n := newNode(t)
				newVLAN(t)
				p := n.NewPod("vl")
				c := conf(v, ranges, `,"vlanId":42,"mtu":1400`)
				out := n.Must(vlan.Role, "ADD", p, c)
				res := roletest.Result(t, out, v)
				roletest.PodEth0(t, res, p)
				pod := open(t, p.Netns)
				l, err := pod.VlanByName("eth0")
				if err != nil || l.Kind != "vlan" || l.ID != 42 || l.MTU != 1400 || !l.Up || l.MAC.String() != res.Interfaces[0].Mac {
					t.Fatalf("pod's eth0 = %+v, %v; want an up vlan 42, mtu 1400, MAC %s", l, err, res.Interfaces[0].Mac)
				}
				roletest.AddrsOnEth0(t, pod, res)
				roletest.RouteOnEth0(t, pod, "192.168.58.0/24", lanHost4)
				dsts := []netip.Addr{lanHost4}
				if name == "dual" {
					dsts = append(dsts, lanHost6)
				}
				for _, d := range dsts {
					if _, err := pod.Ping(d, 3*time.Second); err != nil {
						t.Errorf("the pod cannot reach the LAN host %s on VLAN 42: %v", d, err)
					}
				}
				if eps := n.Endpoints("vlnet"); len(eps) != 1 || eps[0].Plugin != "vlan" || eps[0].Extra["master"] != "lan0" || eps[0].Extra[vlan.ExtraVlanID] != "42" {
					t.Errorf("endpoint records = %+v", eps)
				}
				n.CheckDelTwice(vlan.Role, p, c, out, v, "vlnet")
				if _, err := open(t, "").LinkByName("lan0"); err != nil {
					t.Errorf("the master is gone: %v", err)
				}
			})
		}
	}
}

// TestLinkInContainer: with linkInContainer the master is an interface of
// the pod, which the node does not have.
func TestLinkInContainer(t *testing.T) {
	n := newNode(t)
	newVLAN(t)
	p := n.NewPod("lic")
	pod := open(t, p.Netns)
	if _, _, err := pod.EnsureVeth(netops.VethOpts{HostName: "ens1", PeerName: "ens1p", Peer: pod}); err != nil {
		t.Fatal(err)
	}
	c := conf("1.1.0", v4, `,"master":"ens1","vlanId":7,"linkInContainer":true`)
	out := n.Must(vlan.Role, "ADD", p, c)
	l, err := pod.VlanByName("eth0")
	m, _ := pod.LinkByName("ens1")
	if err != nil || l.ID != 7 || l.MTU != m.MTU {
		t.Errorf("pod's eth0 = %+v, %v; want vlan 7 with ens1's MTU %d", l, err, m.MTU)
	}
	if eps := n.Endpoints("vlnet"); len(eps) != 1 || eps[0].Extra[vlan.ExtraVlanID] != "7" || eps[0].Extra["linkInContainer"] != "true" {
		t.Errorf("endpoint records = %+v; want vlanId 7 and linkInContainer", eps)
	}
	n.Must(vlan.Role, "CHECK", p, roletest.WithPrev(t, c, out))
	for range 2 {
		n.Must(vlan.Role, "DEL", p, c)
	}
	if _, err := pod.LinkByName("ens1"); err != nil {
		t.Errorf("the master in the pod is gone: %v", err)
	}
	n.Empty("vlnet")
}

// TestUndo: an ADD that fails after the device (an IPAM route whose gateway
// no route reaches) leaves no device, record or reservation. On a kernel
// without 802.1Q it fails one step earlier, creating the device, and
// leaves nothing either.
func TestUndo(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("undo")
	c := []byte(`{"cniVersion":"1.0.0","name":"vlnet","type":"vlan","master":"lan0","vlanId":42,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.58.0.0/24","rangeStart":"10.58.0.10"}]],"routes":[{"dst":"192.168.0.0/16","gw":"172.31.0.1"}]}}`)
	err := n.FailedAdd(vlan.Role, p, c, "vlnet")
	nstest.SkipIfKernelLacks(t, "802.1Q (8021q)", err)
	if !strings.Contains(err.Error(), "192.168.0.0/16") || roletest.Code(err) != 5 {
		t.Errorf("ADD with an unreachable route gateway: %v, want code 5 naming the route", err)
	}
}

// TestDelNetnsGone: DEL works (twice) once the pod's namespace is gone.
func TestDelNetnsGone(t *testing.T) {
	n := newNode(t)
	newVLAN(t)
	p := n.NewPod("gone")
	c := conf("1.0.0", dual, `,"master":"lan0","vlanId":42`)
	n.Must(vlan.Role, "ADD", p, c)
	n.DelNetnsGone(vlan.Role, p, c, "vlnet")
}

// TestGC: GC keeps the valid attachments and removes the others' device,
// record and address; STATUS is ready.
func TestGC(t *testing.T) {
	n := newNode(t)
	newVLAN(t)
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	c := conf("1.1.0", v4, `,"master":"lan0","vlanId":42`)
	n.Must(vlan.Role, "ADD", keep, c)
	// A master carries each VLAN once: the second pod is on VLAN 43 of the
	// same network.
	n.Must(vlan.Role, "ADD", drop, conf("1.1.0", v4, `,"master":"lan0","vlanId":43`))
	n.GCKeeps(vlan.Role, keep, drop, c, "vlnet")
}

// TestVlanInUse: a second pod on the same VLAN of the same master is
// refused (the kernel allows one device per VLAN ID and master) with a
// message saying so, and its ADD leaves nothing.
func TestVlanInUse(t *testing.T) {
	n := newNode(t)
	newVLAN(t)
	a, b := n.NewPod("a"), n.NewPod("b")
	c := conf("1.1.0", v4, `,"master":"lan0","vlanId":42`)
	n.Must(vlan.Role, "ADD", a, c)
	if _, err := n.Call(vlan.Role, "ADD", b, c); roletest.Code(err) != 5 || !strings.Contains(err.Error(), "VLAN 42 is already in use") {
		t.Errorf("ADD of a second pod on VLAN 42 of lan0: %v, want code 5 saying the VLAN is in use", err)
	}
	if _, err := open(t, b.Netns).LinkByName("eth0"); err == nil {
		t.Error("the refused pod has an eth0")
	}
	if eps := n.Endpoints("vlnet"); len(eps) != 1 || eps[0].ContainerID != a.ID {
		t.Errorf("endpoint records = %+v, want only the first pod's", eps)
	}
	n.Must(vlan.Role, "DEL", a, c)
	n.Empty("vlnet")
}

// TestCheckFails: CHECK notices a config whose VLAN ID or MTU is not the
// device's, and a device that is down.
func TestCheckFails(t *testing.T) {
	n := newNode(t)
	newVLAN(t)
	p := n.NewPod("chk")
	c := conf("1.0.0", v4, `,"master":"lan0","vlanId":42`)
	out := n.Must(vlan.Role, "ADD", p, c)
	for extra, want := range map[string]string{
		`,"master":"lan0","vlanId":43`:            "VLAN ID 42",
		`,"master":"lan0","vlanId":42,"mtu":1000`: "MTU 1500",
	} {
		other := conf("1.0.0", v4, extra)
		if _, err := n.Call(vlan.Role, "CHECK", p, roletest.WithPrev(t, other, out)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CHECK with %s: %v, want an error saying %q", extra, err, want)
		}
	}
	must(t, open(t, p.Netns).SetLinkDown("eth0"))
	if _, err := n.Call(vlan.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "down") {
		t.Errorf("CHECK of a device that is down: %v, want an error saying so", err)
	}
	n.Must(vlan.Role, "DEL", p, c)
	n.Empty("vlnet")
}
