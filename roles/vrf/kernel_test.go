package vrf_test

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vrf"
)

// TestKernelWithoutVRF: on a kernel without VRF devices the ADD is a
// config error (7) on vrfname that names what the node lacks
// (CONFIG_NET_VRF, module vrf) in the form every role uses; on one with
// them (make test-kernel) it succeeds.
func TestKernelWithoutVRF(t *testing.T) {
	n := roletest.NewNode(t, vrf.Role)
	p := n.NewPod("vrfk")
	peer := nstest.NewNS(t, "vrfkpeer")
	ph, pod := roletest.Open(t, peer), roletest.Open(t, p.Netns)
	_, _, err := ph.EnsureVeth(netops.VethOpts{HostName: "p0", PeerName: "eth0", Peer: pod})
	must(t, err)
	must(t, pod.EnsureAddr("eth0", netip.MustParsePrefix("10.62.1.2/24"), netops.AddrOpts{}))
	c := conf(t, p, "eth0", "10.62.1.2/24", map[string]any{"vrfname": "blue"})
	_, err = n.Call(vrf.Role, "ADD", p, c)
	if roletest.KernelKind(t, "vrf", err, 7) {
		must(t, func() error { _, err := n.Call(vrf.Role, "DEL", p, c); return err }())
		return
	}
	if _, err := pod.LinkByName("blue"); err == nil {
		t.Error("a failed ADD left the VRF blue in the pod")
	}
}
