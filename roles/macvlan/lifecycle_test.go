package macvlan_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestUndo: an ADD that fails after the device (an IPAM route whose gateway
// no route reaches) leaves no device, record or reservation.
func TestUndo(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("undo")
	c := []byte(`{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan","master":"lan0",
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.55.0.0/24","rangeStart":"10.55.0.10"}]],"routes":[{"dst":"192.168.0.0/16","gw":"172.31.0.1"}]}}`)
	_, err := n.Call(macvlan.Role, "ADD", p, c)
	if err == nil || !strings.Contains(err.Error(), "192.168.0.0/16") {
		t.Fatalf("ADD with an unreachable route gateway: %v, want the route's error", err)
	}
	if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is left after a failed ADD")
	}
	n.Empty("mvnet")
}

// TestDelNetnsGone: DEL works (twice) once the pod's namespace is gone.
func TestDelNetnsGone(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("gone")
	c := conf("1.0.0", dual, `,"master":"lan0"`)
	n.Must(macvlan.Role, "ADD", p, c)
	name := strings.TrimPrefix(p.Netns, "/run/netns/")
	if err := netops.DeleteNamedNS(name); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		n.Must(macvlan.Role, "DEL", p, c)
	}
	if _, err := netops.CreateNamedNS(name); err != nil { // for the test's cleanup
		t.Fatal(err)
	}
	n.Empty("mvnet")
}

// TestGC: GC keeps the valid attachments and removes the others' device,
// record and address.
func TestGC(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	c := conf("1.1.0", v4, `,"master":"lan0"`)
	n.Must(macvlan.Role, "ADD", keep, c)
	n.Must(macvlan.Role, "ADD", drop, c)
	n.Must(macvlan.Role, "GC", keep, roletest.WithKeep(t, c, keep))
	if _, err := roletest.Open(t, keep.Netns).LinkByName("eth0"); err != nil {
		t.Errorf("GC removed the kept pod's device: %v", err)
	}
	if _, err := roletest.Open(t, drop.Netns).LinkByName("eth0"); err == nil {
		t.Error("GC left the dropped pod's device")
	}
	if rs := n.Reservations("mvnet"); len(rs) != 1 || rs[0].ContainerID != keep.ID {
		t.Errorf("reservations after GC: %+v", rs)
	}
	n.Must(macvlan.Role, "STATUS", keep, c)
	n.Must(macvlan.Role, "DEL", keep, c)
	n.Empty("mvnet")
}

// TestCheckFails: CHECK notices a device that is down, and a config whose
// mode is not the device's.
func TestCheckFails(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("chk")
	c := conf("1.0.0", v4, `,"master":"lan0"`)
	out := n.Must(macvlan.Role, "ADD", p, c)
	other := conf("1.0.0", v4, `,"master":"lan0","mode":"vepa"`)
	if _, err := n.Call(macvlan.Role, "CHECK", p, roletest.WithPrev(t, other, out)); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("CHECK with mode vepa of a bridge-mode device: %v, want an error about the mode", err)
	}
	if err := roletest.Open(t, p.Netns).SetLinkDown("eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(macvlan.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "down") {
		t.Errorf("CHECK of a device that is down: %v, want an error saying so", err)
	}
	n.Must(macvlan.Role, "DEL", p, c)
	n.Empty("mvnet")
}
