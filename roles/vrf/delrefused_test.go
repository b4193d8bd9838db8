package vrf_test

import (
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vrf"
)

// TestDelConfigRefused: a vrf config edited in place after ADD into one ADD
// refuses (table 254, the main table) does not stop DEL (twice): the
// interface leaves the VRF, which goes with its last interface (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n := roletest.NewNode(t, vrf.Role)
	p := n.NewPod("delref")
	peer := nstest.NewNS(t, "vrfpeer")
	ph, pod := roletest.Open(t, peer), roletest.Open(t, p.Netns)
	_, _, err := ph.EnsureVeth(netops.VethOpts{HostName: "p0", PeerName: "eth0", Peer: pod})
	must(t, err)
	c := conf(t, p, "eth0", "10.62.1.2/24", map[string]any{"vrfname": "blue"})
	if _, kerr := pod.EnsureVRF("cbxprobe", 0); kerr != nil {
		nstest.SkipIfKernelLacks(t, "VRF devices (vrf module)", kerr)
		t.Fatal(kerr)
	}
	must(t, pod.DeleteLink("cbxprobe"))
	n.DelRefused(vrf.Role, p, c, map[string]any{"table": 254}, "table")
	if _, err := pod.VRF("blue"); err == nil {
		t.Error("the VRF blue is still there after DEL of its only interface")
	}
	if l, err := pod.LinkByName("eth0"); err != nil || l.MasterIndex != 0 {
		t.Errorf("eth0 after DEL: %+v, %v; want it out of the VRF", l, err)
	}
}
