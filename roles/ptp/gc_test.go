package ptp_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

// TestGC: GC keeps the attachments in the valid list and removes the
// others' host veth, masquerade entries, record and address.
func TestGC(t *testing.T) {
	n := newNode(t)
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	c := conf("1.1.0", v4, `,"ipMasq":true`)
	n.Must(ptp.Role, "ADD", keep, c)
	n.Must(ptp.Role, "ADD", drop, c)
	n.Must(ptp.Role, "GC", keep, roletest.WithKeep(t, c, keep))
	host := open(t, "")
	if _, err := host.LinkByName(attach.HostVethName(keep.ID, "eth0")); err != nil {
		t.Errorf("GC removed the kept pod's veth: %v", err)
	}
	if _, err := host.LinkByName(attach.HostVethName(drop.ID, "eth0")); err == nil {
		t.Error("GC left the dropped pod's veth")
	}
	if eps := n.Endpoints("ptpnet"); len(eps) != 1 || eps[0].ContainerID != keep.ID {
		t.Errorf("records after GC: %+v", eps)
	}
	if rs := n.Reservations("ptpnet"); len(rs) != 1 || rs[0].ContainerID != keep.ID {
		t.Errorf("reservations after GC: %+v", rs)
	}
	if es, _ := host.MasqEntries(); len(es) != 1 {
		t.Errorf("masquerade entries after GC: %v, want the kept pod's", es)
	}
	n.Must(ptp.Role, "STATUS", keep, c)
	n.Must(ptp.Role, "DEL", keep, c)
	n.Empty("ptpnet")
}

// TestCheckFails: CHECK notices the node's route to the pod gone.
func TestCheckFails(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("chk")
	c := conf("1.0.0", v4, "")
	out := n.Must(ptp.Role, "ADD", p, c)
	host := open(t, "")
	hostName := attach.HostVethName(p.ID, "eth0")
	rs, err := host.Routes(hostName)
	if err != nil || len(rs) == 0 {
		t.Fatalf("routes of %s: %v %v", hostName, rs, err)
	}
	for _, r := range rs {
		if err := host.DeleteRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Call(ptp.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil {
		t.Error("CHECK passed without the node's route to the pod")
	}
	n.Must(ptp.Role, "DEL", p, c)
}
