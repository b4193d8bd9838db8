package netops_test

import (
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestNetnsID: a veth's PeerNetnsID is the NetnsID of its peer's
// namespace, and differs from that of another namespace.
func TestNetnsID(t *testing.T) {
	hostPath := nstest.NewNS(t, "nsidhost")
	host, err := netops.Open(hostPath)
	must(t, err)
	defer host.Close()
	podPath, otherPath := nstest.NewNS(t, "nsidpod"), nstest.NewNS(t, "nsidother")
	pod, err := netops.Open(podPath)
	must(t, err)
	defer pod.Close()
	_, _, err = host.EnsureVeth(netops.VethOpts{HostName: "v0", PeerName: "eth0", Peer: pod})
	must(t, err)
	peer, err := host.PeerNetnsID("v0")
	must(t, err)
	want, err := host.NetnsID(podPath)
	must(t, err)
	if peer < 0 || peer != want {
		t.Errorf("PeerNetnsID = %d, NetnsID(pod) = %d: want the same id", peer, want)
	}
	if other, err := host.NetnsID(otherPath); err != nil || other == peer {
		t.Errorf("NetnsID(other) = %d, %v: want an id other than %d", other, err, peer)
	}
	lo, err := host.PeerNetnsID("lo")
	must(t, err)
	if lo != -1 {
		t.Errorf("PeerNetnsID(lo) = %d, want -1", lo)
	}
}
