package nft_test

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

var (
	nodeIP6  = netip.MustParsePrefix("fd00:240::23/64")
	podIP6   = netip.MustParsePrefix("fd00:240::24/64")
	fabricG6 = netip.MustParsePrefix("fd00:240::1/64")
)

// newDualStackLab is newAzureLab with IPv6 on the NIC, the fabric and a pod
// on azure0, the NIC enslaved and the fabric rules in place for the pod.
func newDualStackLab(t *testing.T) *azureLab {
	t.Helper()
	l := newAzureLab(t)
	noDAD := netops.AddrOpts{NoDAD: true}
	must(t, l.node.EnsureAddr("eth0", nodeIP6, noDAD))
	must(t, l.fabric.EnsureAddr("eth0", fabricG6, noDAD))
	_, err := l.node.EnsureBridge(netops.BridgeOpts{Name: "azure0"})
	must(t, err)
	up, err := l.node.EnsureUplink(netops.UplinkOpts{Uplink: "eth0", Bridge: "azure0"})
	must(t, err)
	_, _, err = l.node.EnsureVeth(netops.VethOpts{HostName: "azvtest6", PeerName: "eth0", Peer: l.pod, Master: "azure0"})
	must(t, err)
	podEth, err := l.pod.LinkByName("eth0")
	must(t, err)
	l.podMAC = podEth.MAC
	must(t, l.pod.EnsureAddr("eth0", podIP, noDAD))
	must(t, l.pod.EnsureAddr("eth0", podIP6, noDAD))
	must(t, l.node.NFT().EnsureFabricUplink("eth0", up.MAC))
	must(t, l.node.NFT().EnsureFabricPods([]netip.Addr{podIP.Addr(), podIP6.Addr()}, l.podMAC))
	must(t, l.node.NFT().EnsureFabricPods([]netip.Addr{podIP.Addr(), podIP6.Addr()}, l.podMAC))
	return l
}

// fabricNeighMAC returns the MAC the fabric has for ip ("" for none).
func (l *azureLab) fabricNeighMAC(t *testing.T, ip netip.Addr) string {
	t.Helper()
	neighs, err := l.fabric.Neighs("eth0")
	must(t, err)
	for _, n := range neighs {
		if n.IP == ip && n.MAC != nil {
			return n.MAC.String()
		}
	}
	return ""
}

// TestFabricIPv6: the fabric resolves a pod's IPv6 address to the NIC's MAC
// (the pod's neighbour advertisement is rewritten), reaches the pod by it
// (frames to the NIC's MAC for the pod's address get the pod's MAC), and a
// pod that asks first (its solicitation names the NIC's MAC too) reaches the
// fabric.
func TestFabricIPv6(t *testing.T) {
	t.Parallel()
	t.Run("fabric asks first", func(t *testing.T) {
		l := newDualStackLab(t)
		if got := nstest.SeenFrom(t, l.fabric.Path(), nstest.Serve(t, l.pod.Path(), podIP6.Addr())); got != fabricG6.Addr() {
			t.Errorf("pod saw the fabric as %v", got)
		}
		if got := l.fabricNeighMAC(t, podIP6.Addr()); got != l.nicMAC.String() {
			t.Errorf("the fabric has MAC %q for the pod's %s, want the NIC's %s", got, podIP6.Addr(), l.nicMAC)
		}
		// IPv4 still works next to it.
		if got := nstest.SeenFrom(t, l.fabric.Path(), nstest.Serve(t, l.pod.Path(), podIP.Addr())); got != fabricG.Addr() {
			t.Errorf("pod saw the fabric as %v over IPv4", got)
		}
	})
	t.Run("pod asks first", func(t *testing.T) {
		l := newDualStackLab(t)
		if got := nstest.SeenFrom(t, l.pod.Path(), nstest.Serve(t, l.fabric.Path(), fabricG6.Addr())); got != podIP6.Addr() {
			t.Errorf("fabric saw the pod as %v", got)
		}
		if got := l.fabricNeighMAC(t, podIP6.Addr()); got != l.nicMAC.String() {
			t.Errorf("the fabric has MAC %q for the pod's %s, want the NIC's %s", got, podIP6.Addr(), l.nicMAC)
		}
	})
	t.Run("delete", func(t *testing.T) {
		l := newDualStackLab(t)
		pods, err := l.node.NFT().FabricPods()
		must(t, err)
		if len(pods) != 2 || pods[podIP6.Addr()].String() != l.podMAC.String() || pods[podIP.Addr()].String() != l.podMAC.String() {
			t.Fatalf("fabric pods %v, want %s and %s at %s", pods, podIP.Addr(), podIP6.Addr(), l.podMAC)
		}
		must(t, l.node.NFT().DeleteFabricPods([]netip.Addr{podIP6.Addr()}))
		must(t, l.node.NFT().DeleteFabricPods([]netip.Addr{podIP6.Addr()}))
		if pods, _ := l.node.NFT().FabricPods(); len(pods) != 1 || pods[podIP.Addr()] == nil {
			t.Errorf("fabric pods after deleting the IPv6 one: %v", pods)
		}
		// Without its element, the fabric's frames for the pod's IPv6
		// address go to the node, not the pod.
		srv := nstest.Serve(t, l.pod.Path(), podIP6.Addr())
		if err := dial(t, l.fabric.Path(), srv); err == nil {
			t.Error("the fabric reached the pod's IPv6 address without its element")
		}
		must(t, l.node.NFT().DeleteFabric())
		must(t, l.node.NFT().DeleteFabric())
		checkBridgeChains(t, l.node, nil)
	})
}
