package netops_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// TestIsLocalAddr: the addresses of the namespace's interfaces and the
// loopback range are local; a neighbour on the same subnet, the subnet's
// broadcast, an address behind a route, one with no route and a multicast
// group are not.
func TestIsLocalAddr(t *testing.T) {
	h, peer := openNS(t, "local"), openNS(t, "peer")
	_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "veth0", PeerName: "eth0", Peer: peer})
	must(t, err)
	must(t, h.EnsureAddr("veth0", netip.MustParsePrefix("192.0.2.10/24"), netops.AddrOpts{}))
	must(t, h.EnsureAddr("veth0", netip.MustParsePrefix("2001:db8::10/64"), netops.AddrOpts{NoDAD: true}))
	must(t, h.SetLinkUp("veth0"))
	must(t, peer.SetLinkUp("eth0"))
	must(t, h.EnsureRoute(netops.Route{Dst: netip.MustParsePrefix("198.51.100.0/24"), GW: netip.MustParseAddr("192.0.2.1"), Dev: "veth0"}))
	// The kernel adds the local route of an IPv6 address once the link has
	// carrier, which it reports asynchronously (linkwatch): wait for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ok, err := h.IsLocalAddr(netip.MustParseAddr("2001:db8::10")); ok || err != nil || time.Now().After(deadline) {
			break
		}
	}
	for addr, want := range map[string]bool{
		"192.0.2.10": true, "2001:db8::10": true, "127.0.0.1": true, "127.0.0.53": true, "::1": true,
		"192.0.2.11": false, "192.0.2.255": false, "2001:db8::11": false,
		"198.51.100.53": false, "10.96.0.1": false, "2001:db8:1::1": false, "224.0.0.1": false,
	} {
		got, err := h.IsLocalAddr(netip.MustParseAddr(addr))
		if err != nil || got != want {
			t.Errorf("IsLocalAddr(%s) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := h.IsLocalAddr(netip.Addr{}); err == nil {
		t.Error("IsLocalAddr of the zero Addr: no error")
	}
}
