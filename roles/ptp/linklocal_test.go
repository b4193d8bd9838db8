package ptp_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

// TestPodIPv6: an IPv4-only ptp pod has no IPv6 address on its interface
// nor on its host veth once the kernel's link watch has handled their
// carrier (before issue 60 each end had a link-local one, and the pod
// reached the node's link-local services through its host end). A
// dual-stack pod has its global address and PodLinkLocal of its host end,
// bound by the source check: what it sends from that address to the host
// end's link-local address is dropped, what it sends from its global
// address to the node passes, and DEL (twice) removes it all.
func TestPodIPv6(t *testing.T) {
	n := newNode(t)
	for _, tc := range []struct {
		name   string
		ranges string
	}{{"ipv4 only", v4}, {"dual stack", dual}} {
		t.Run(tc.name, func(t *testing.T) {
			c := conf("1.0.0", tc.ranges, "")
			p := n.NewPod("p")
			ips := podIPs(t, n.Must(ptp.Role, "ADD", p, c))
			port := attach.HostVethName(p.ID, "eth0")
			nstest.WaitLinksUp(t, p.Netns)
			nstest.WaitLinksUp(t, nodeNS)
			podV6, hostV6 := roletest.IPv6Of(t, p.Netns, "eth0"), roletest.IPv6Of(t, "", port)
			if tc.ranges == v4 {
				if len(podV6)+len(hostV6) != 0 {
					t.Errorf("IPv6 addresses: %v on the pod's eth0, %v on its host veth, want none", podV6, hostV6)
				}
				n.Must(ptp.Role, "DEL", p, c)
				n.Must(ptp.Role, "DEL", p, c)
				return
			}
			ll := nft.PodLinkLocal(port)
			global := ips[len(ips)-1]
			if want := []netip.Addr{global, ll}; !slices.Equal(podV6, want) {
				t.Errorf("the pod's eth0 has IPv6 addresses %v, want %v", podV6, want)
			}
			var hostLL netip.Addr
			for _, a := range hostV6 {
				if a.IsLinkLocalUnicast() {
					hostLL = a
				}
			}
			if !hostLL.IsValid() {
				t.Fatalf("the host veth has no link-local address: %v", hostV6)
			}
			sink := nstest.ListenUDP(t, nodeNS, netip.IPv6Unspecified())
			gw := netip.MustParseAddr("fd77::1")
			if !nstest.SendFromTo(t, p.Netns, "eth0", global, gw, sink, 10*time.Second) {
				t.Errorf("a datagram from the pod's %s to its gateway %s did not arrive", global, gw)
			}
			if nstest.SendFromTo(t, p.Netns, "eth0", ll, hostLL, sink, 1500*time.Millisecond) {
				t.Errorf("a datagram from the pod's link-local %s to the host end's %s got through", ll, hostLL)
			}
			n.Must(ptp.Role, "DEL", p, c)
			n.Must(ptp.Role, "DEL", p, c)
			if got, _ := roletest.Open(t, "").NFT().SourceCheckAddrs(nft.SrcCheckRouted, port); len(got) != 0 {
				t.Errorf("after the DELs the veth keeps %v", got)
			}
		})
	}
}
