package bridge_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestPodIPv6: a pod of an IPv4-only network has no IPv6 address on its
// interface, nor on its host veth, once the kernel's link watch has
// handled their carrier (when it makes link-local addresses: before issue
// 60 each end had one), after DEL and ADD again too. A dual-stack pod has
// its global address and one link-local address, PodLinkLocal of its
// port, which the port's source address check binds: its neighbour
// advertisements pass (another pod resolves it), a datagram from it to
// another pod's link-local address does not (link-local is for discovery
// only), one from its global address does.
func TestPodIPv6(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brll4"); host.DeleteLink("brll6") })

	t.Run("ipv4 only", func(t *testing.T) {
		c := gwConf("ll4", "brll4", 40, "")
		p := n.NewPod("v4")
		for round := range 2 {
			podAddr(t, n.Must(bridge.Role, "ADD", p, c))
			nstest.WaitLinksUp(t, p.Netns)
			nstest.WaitLinksUp(t, nodeNS)
			if got := roletest.IPv6Of(t, p.Netns, "eth0"); len(got) != 0 {
				t.Errorf("ADD %d: the pod's eth0 has IPv6 addresses %v, want none", round+1, got)
			}
			if got := roletest.IPv6Of(t, nodeNS, bridge.HostVethName(p.ID, "eth0")); len(got) != 0 {
				t.Errorf("ADD %d: the pod's host veth has IPv6 addresses %v, want none", round+1, got)
			}
			n.Must(bridge.Role, "DEL", p, c)
			n.Must(bridge.Role, "DEL", p, c)
		}
	})

	t.Run("dual stack", func(t *testing.T) {
		c := []byte(`{"cniVersion":"1.0.0","name":"ll6","type":"bridge","bridge":"brll6","isGateway":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.11.41.0/24","gateway":"10.11.41.1"}],[{"subnet":"fd00:11:41::/64","gateway":"fd00:11:41::1"}]]}}`)
		a, b := n.NewPod("a"), n.NewPod("b")
		global := map[string]netip.Addr{}
		for _, p := range []roletest.Pod{a, b} {
			r := roletest.Result(t, n.Must(bridge.Role, "ADD", p, c), "1.0.0")
			for _, ipc := range r.IPs {
				if ip, _ := netip.AddrFromSlice(ipc.Address.IP); ip.Is6() && !ip.Is4In6() {
					global[p.ID] = ip
				}
			}
			nstest.WaitLinksUp(t, p.Netns)
		}
		port := bridge.HostVethName(a.ID, "eth0")
		ll, bll := nft.PodLinkLocal(port), nft.PodLinkLocal(bridge.HostVethName(b.ID, "eth0"))
		want := []netip.Addr{global[a.ID], ll}
		if got := roletest.IPv6Of(t, a.Netns, "eth0"); !slices.Equal(got, want) && !slices.Equal(got, []netip.Addr{ll, global[a.ID]}) {
			t.Errorf("the pod's eth0 has IPv6 addresses %v, want %v", got, want)
		}
		if got, err := host.NFT().SourceCheckAddrs(nft.SrcCheckBridge, port); err != nil || !slices.Contains(got, ll) || !slices.Contains(got, global[a.ID]) {
			t.Errorf("the pod's port may send from %v (%v), want its addresses and %s", got, err, ll)
		}

		sink := nstest.ListenUDP(t, b.Netns, netip.IPv6Unspecified())
		if !nstest.SendFromTo(t, a.Netns, "eth0", global[a.ID], global[b.ID], sink, 10*time.Second) {
			t.Error("a datagram from the pod's global address did not arrive")
		}
		if nstest.SendFromTo(t, a.Netns, "eth0", ll, bll, sink, 1500*time.Millisecond) {
			t.Errorf("a datagram from the pod's link-local address %s to the other's %s got through its port", ll, bll)
		}
		// b resolves a's link-local address: a's advertisement passes.
		probe := nstest.ListenUDP(t, a.Netns, netip.IPv6Unspecified())
		nstest.SendFromTo(t, b.Netns, "eth0", bll, ll, probe, 200*time.Millisecond)
		bh, err := netops.Open(b.Netns)
		if err != nil {
			t.Fatal(err)
		}
		defer bh.Close()
		resolved := false
		for deadline := time.Now().Add(10 * time.Second); !resolved && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ns, err := bh.Neighs("eth0")
			if err != nil {
				t.Fatal(err)
			}
			resolved = slices.ContainsFunc(ns, func(e netops.Neigh) bool { return e.IP == ll && e.MAC != nil })
		}
		if !resolved {
			t.Errorf("the other pod did not resolve the pod's link-local address %s", ll)
		}

		for _, p := range []roletest.Pod{a, b} {
			n.Must(bridge.Role, "DEL", p, c)
			n.Must(bridge.Role, "DEL", p, c)
		}
		if got, _ := host.NFT().SourceCheckAddrs(nft.SrcCheckBridge, port); len(got) != 0 {
			t.Errorf("the deleted port keeps %v", got)
		}
	})
}
