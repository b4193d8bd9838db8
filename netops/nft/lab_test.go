package nft_test

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nstest"
)

func TestMasqueradeTraffic(t *testing.T) {
	t.Parallel()
	l := labtest.New(t, 2)
	// An "outside" namespace behind the host, routing back to the pods so
	// that unmasqueraded traffic works too and shows its source.
	outside := openNS(t, "lo")
	_, _, err := l.Host.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: outside})
	must(t, err)
	hostOut4, hostOut6 := netip.MustParseAddr("192.168.99.1"), netip.MustParseAddr("fd00:98::1")
	out4, out6 := netip.MustParseAddr("192.168.99.2"), netip.MustParseAddr("fd00:98::2")
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut4, 24), netops.AddrOpts{}))
	must(t, l.Host.EnsureAddr("vout", netip.PrefixFrom(hostOut6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, outside.EnsureAddr("eth0", netip.PrefixFrom(out4, 24), netops.AddrOpts{}))
	must(t, outside.EnsureAddr("eth0", netip.PrefixFrom(out6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, outside.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), GW: hostOut4, Dev: "eth0"}))
	must(t, outside.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("fd00:99::/64"), GW: hostOut6, Dev: "eth0"}))
	must(t, l.Host.SetSysctls(
		netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"},
	))

	a4, a6 := labtest.PodAddrs(0)
	b4, b6 := labtest.PodAddrs(1)
	tests := []struct {
		family            string
		server, hostOut   netip.Addr
		masqPod, plainPod netip.Prefix
	}{
		{"v4", out4, hostOut4, a4, b4},
		{"v6", out6, hostOut6, a6, b6},
	}
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			srv := nstest.Serve(t, outside.Path(), tt.server)
			must(t, l.Host.NFT().EnsureMasq("labnet", []netip.Prefix{tt.masqPod}))
			if got := nstest.SeenFrom(t, l.Pods[0].Path(), srv); got != tt.hostOut {
				t.Errorf("masqueraded pod seen as %v, want %v", got, tt.hostOut)
			}
			if got := nstest.SeenFrom(t, l.Pods[1].Path(), srv); got != tt.plainPod.Addr() {
				t.Errorf("other pod seen as %v, want %v (not masqueraded)", got, tt.plainPod.Addr())
			}
			must(t, l.Host.NFT().DeleteMasq([]netip.Addr{tt.masqPod.Addr()}))
			if got := nstest.SeenFrom(t, l.Pods[0].Path(), srv); got != tt.masqPod.Addr() {
				t.Errorf("after DeleteMasq pod seen as %v, want %v", got, tt.masqPod.Addr())
			}
		})
	}
}
