package netops_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// benchPodAdd is the kernel work of one bridge-plugin ADD: open both
// namespaces, ensure the bridge, the veth pair, the address, the default
// route and the masquerade element.
func benchPodAdd(b *testing.B, hostPath, podPath string, i int) {
	host, err := netops.Open(hostPath)
	if err != nil {
		b.Fatal(err)
	}
	defer host.Close()
	pod, err := netops.Open(podPath)
	if err != nil {
		b.Fatal(err)
	}
	defer pod.Close()
	br, err := host.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := host.EnsureVeth(netops.VethOpts{
		HostName: fmt.Sprintf("veth%d", i), PeerName: "eth0", Peer: pod, Master: "br0", MasterIndex: br.Index,
	}); err != nil {
		b.Fatal(err)
	}
	ip := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)}), 16)
	if err := pod.EnsureAddr("eth0", ip, netops.AddrOpts{}); err != nil {
		b.Fatal(err)
	}
	if err := pod.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.99.255.254"), Dev: "eth0", Onlink: true}); err != nil {
		b.Fatal(err)
	}
	if err := host.NFT().EnsureMasq("bench", []netip.Prefix{ip}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPodAdd measures benchPodAdd, pod namespaces created untimed.
func BenchmarkPodAdd(b *testing.B) {
	hostPath := nstest.NewNS(b, "bh")
	for i := range b.N {
		b.StopTimer()
		podPath := nstest.NewNS(b, "bp")
		b.StartTimer()
		benchPodAdd(b, hostPath, podPath, i+1)
	}
}

// BenchmarkPodDel measures the kernel work of a DEL: the masquerade element
// first, then the veth, with the nftables socket open across the veth delete.
func BenchmarkPodDel(b *testing.B) {
	hostPath := nstest.NewNS(b, "bh")
	for i := range b.N {
		b.StopTimer()
		benchPodAdd(b, hostPath, nstest.NewNS(b, "bp"), i+1)
		b.StartTimer()
		host, err := netops.Open(hostPath)
		if err != nil {
			b.Fatal(err)
		}
		ip := netip.AddrFrom4([4]byte{10, 99, byte((i + 1) >> 8), byte(i + 1)})
		if err := host.NFT().DeleteMasq([]netip.Addr{ip}); err != nil {
			b.Fatal(err)
		}
		if err := host.DeleteLink(fmt.Sprintf("veth%d", i+1)); err != nil {
			b.Fatal(err)
		}
		if err := host.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
