package main

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/store"
)

// TestOverlayNetworks: the egress gateways and the LoadBalancer
// announcer are served for every family net-conf.json enables, an
// IPv6-only network's (issue 64: both started only with EnableIPv4) as an
// IPv4 one's, whatever the backend, and their cluster networks are those.
func TestOverlayNetworks(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       []string
	}{
		{"IPv4", `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`, []string{"10.244.0.0/16"}},
		{"dual stack", `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`,
			[]string{"10.244.0.0/16", "fd00:10:244::/56"}},
		{"IPv6 only", `{"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`,
			[]string{"fd00:10:244::/56"}},
		{"IPv6 only, the host-gw backend", `{"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": "2001:db8:244::/48", "Backend": {"Type": "host-gw"}}`,
			[]string{"2001:db8:244::/48"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := netconf.Parse([]byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			var want []netip.Prefix
			for _, s := range tc.want {
				want = append(want, netip.MustParsePrefix(s))
			}
			if got := overlayNetworks(c); !slices.Equal(got, want) {
				t.Errorf("overlayNetworks = %v, want %v (no egress gateway, no LoadBalancer address served at all if empty)", got, want)
			}
		})
	}
	if got := overlayNetworks(nil); got != nil {
		t.Errorf("overlayNetworks(nil) = %v, want none", got)
	}
}

// TestOverlayUplink: once the overlay agent records its lease as ready,
// the egress gateways get its uplink and the cluster networks, whichever
// families they are (an IPv6-only network's too: issue 64); not before,
// not after the agent stopped, and never without a network.
func TestOverlayUplink(t *testing.T) {
	dir := t.TempDir()
	v4, v6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")
	if _, _, ok := overlayUplink(dir, []netip.Prefix{v6}); ok {
		t.Fatal("ready without a store")
	}
	put := func(st store.OverlayState) {
		t.Helper()
		s, err := store.Open(store.Dir(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.PutOverlay(st); err != nil {
			t.Fatal(err)
		}
	}
	// An IPv6-only vxlan network: the one device is flannel-v6.1.
	l := store.OverlayLease{Network6: v6, Subnet6: netip.MustParsePrefix("fd00:10:244:1::/64"), Iface: "eth0", Device: "flannel-v6.1", Device6: "flannel-v6.1"}
	put(store.OverlayState{Lease: l})
	if _, _, ok := overlayUplink(dir, []netip.Prefix{v6}); ok {
		t.Fatal("ready before the overlay is")
	}
	put(store.OverlayState{Lease: l, Ready: true})
	for _, nets := range [][]netip.Prefix{{v6}, {v4}, {v4, v6}} {
		up, got, ok := overlayUplink(dir, nets)
		if !ok || up != "eth0" || !slices.Equal(got, nets) {
			t.Errorf("overlayUplink(%v) = %q, %v, %v; want eth0, %v, true", nets, up, got, ok, nets)
		}
	}
	if up, got, ok := overlayUplink(dir, []netip.Prefix{netip.MustParsePrefix("fd00:10:244::1/56")}); !ok || up != "eth0" || !slices.Equal(got, []netip.Prefix{v6}) {
		t.Errorf("an unmasked network: %q, %v, %v; want eth0, %v (masked), true", up, got, ok, v6)
	}
	if _, _, ok := overlayUplink(dir, nil); ok {
		t.Error("ready without a cluster network")
	}
	put(store.OverlayState{Lease: l, Ready: true, Stopped: true})
	if _, _, ok := overlayUplink(dir, []netip.Prefix{v6}); ok {
		t.Error("ready after the overlay agent stopped")
	}
}
