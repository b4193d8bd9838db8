package netops_test

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestOwnAddr: a namespace set up as a node with other services' addresses.
// The uplink's own addresses, a device whose only address is a /32 (some
// clouds), 127.0.0.1 and ::1 are the node's; kube-proxy's kube-ipvs0 and
// NodeLocal DNSCache's nodelocaldns (bridges standing in for the dummies
// this kernel lacks), link-local addresses, the loopback range beyond
// 127.0.0.1, an address on lo, a secondary address, a /32 and a /128 VIP
// beside the uplink's subnet and an AnyIP local route are not, each with
// the device named; another machine's address is not local at all.
func TestOwnAddr(t *testing.T) {
	h, peer := openNS(t, "own"), openNS(t, "ownpeer")
	_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "uplink0", PeerName: "eth0", Peer: peer})
	must(t, err)
	_, _, err = h.EnsureVeth(netops.VethOpts{HostName: "cloud0", PeerName: "eth1", Peer: peer})
	must(t, err)
	for _, l := range []string{"kube-ipvs0", "nodelocaldns"} {
		_, err := h.EnsureBridge(netops.BridgeOpts{Name: l})
		must(t, err)
	}
	for _, a := range []struct{ link, p string }{
		{"uplink0", "192.0.2.10/24"}, {"uplink0", "192.0.2.100/32"}, {"uplink0", "192.0.2.101/24"},
		{"uplink0", "169.254.7.7/16"}, {"uplink0", "2001:db8::10/64"}, {"uplink0", "2001:db8::100/128"},
		{"cloud0", "198.51.100.7/32"},
		{"kube-ipvs0", "10.96.0.1/32"}, {"kube-ipvs0", "10.96.0.10/32"}, {"nodelocaldns", "169.254.20.10/32"},
		{"lo", "203.0.113.53/32"},
	} {
		must(t, h.EnsureAddr(a.link, netip.MustParsePrefix(a.p), netops.AddrOpts{NoDAD: true}))
	}
	for _, l := range []string{"uplink0", "cloud0"} {
		must(t, h.SetLinkUp(l))
	}
	for _, l := range []string{"eth0", "eth1"} {
		must(t, peer.SetLinkUp(l))
	}
	nh := nstest.Netlink(t, h.Path())
	_, anyIP, _ := net.ParseCIDR("203.0.113.128/25")
	lo, err := nh.LinkByName("lo")
	must(t, err)
	must(t, nh.RouteAdd(&netlink.Route{Dst: anyIP, Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, LinkIndex: lo.Attrs().Index, Scope: netlink.SCOPE_HOST}))
	// The kernel makes an IPv6 address local once its link has carrier,
	// which it reports asynchronously (linkwatch): wait for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ok, err := h.IsLocalAddr(netip.MustParseAddr("2001:db8::100")); ok || err != nil || time.Now().After(deadline) {
			break
		}
	}
	var ll6 netip.Addr
	all, err := h.AllAddrs("uplink0")
	must(t, err)
	for _, p := range all {
		if p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			ll6 = p.Addr()
		}
	}
	for _, tc := range []struct {
		addr string
		want netops.NotOwn
		link string // in Why
	}{
		{"192.0.2.10", netops.Own, ""},
		{"2001:db8::10", netops.Own, ""},
		{"198.51.100.7", netops.Own, ""},
		{"127.0.0.1", netops.Own, ""},
		{"::1", netops.Own, ""},
		{"10.96.0.1", netops.ServiceDevice, "kube-ipvs0"},
		{"10.96.0.10", netops.ServiceDevice, "kube-ipvs0"},
		{"169.254.20.10", netops.ServiceDevice, "nodelocaldns"},
		{"169.254.7.7", netops.LinkLocal, "uplink0"},
		{ll6.String(), netops.LinkLocal, "uplink0"},
		{"127.0.0.53", netops.LoopbackRange, "127.0.0.53"},
		{"203.0.113.53", netops.OnLoopback, "lo"},
		{"203.0.113.200", netops.NoDevice, "local route"},
		{"192.0.2.101", netops.Secondary, "uplink0"},
		{"192.0.2.100", netops.HostBeside, "uplink0"},
		{"2001:db8::100", netops.HostBeside, "uplink0"},
		{"192.0.2.11", netops.NotLocal, ""},
		{"198.51.100.53", netops.NotLocal, ""},
	} {
		got, err := h.OwnAddr(netip.MustParseAddr(tc.addr))
		if err != nil || got.NotOwn != tc.want || got.Own() != (tc.want == netops.Own) {
			t.Errorf("OwnAddr(%s) = %+v, %v; want NotOwn %d", tc.addr, got, err, tc.want)
			continue
		}
		if why := got.Why(); (why == "") != got.Own() || !strings.Contains(why, tc.link) {
			t.Errorf("OwnAddr(%s).Why() = %q; want it to name %q", tc.addr, why, tc.link)
		}
	}

	// The device kube-ipvs0 and nodelocaldns really are: a dummy, by kind
	// whatever its name (where the kernel has dummy devices: make
	// test-kernel).
	_, err = h.EnsureDummy("vip0")
	nstest.SkipIfKernelLacks(t, "dummy devices (dummy)", err)
	must(t, err)
	must(t, h.EnsureAddr("vip0", netip.MustParsePrefix("192.0.2.200/32"), netops.AddrOpts{}))
	if got, err := h.OwnAddr(netip.MustParseAddr("192.0.2.200")); err != nil || got.NotOwn != netops.ServiceDevice || !strings.Contains(got.Why(), "vip0, a dummy device") {
		t.Errorf("OwnAddr(192.0.2.200 on a dummy) = %+v (%s), %v; want ServiceDevice", got, got.Why(), err)
	}
}
