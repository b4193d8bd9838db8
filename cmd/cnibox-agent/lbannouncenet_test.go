package main

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/store"
)

// TestLBAnnounceNetworks: the LoadBalancer announcer starts for every
// family net-conf.json enables, a single-stack IPv6 cluster's too (issue
// 64: it started only with EnableIPv4), and, given those networks, it is
// handed the uplink once the overlay agent holds its lease, an IPv6-only
// one (flannel-v6.1) as an IPv4 one (the old start waited on the IPv4
// network, which an IPv6-only net-conf.json has not).
func TestLBAnnounceNetworks(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(store.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	v6 := netip.MustParsePrefix("fd00:10:244::/56")
	err = s.PutOverlay(store.OverlayState{Ready: true, Lease: store.OverlayLease{Network6: v6, Subnet6: netip.MustParsePrefix("fd00:10:244:1::/64"),
		Iface: "eth0", Device: "flannel-v6.1", Device6: "flannel-v6.1"}})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
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
			nets := lbAnnounceNetworks(c)
			if !slices.Equal(nets, want) {
				t.Fatalf("lbAnnounceNetworks = %v, want %v (empty: no LoadBalancer address announced at all)", nets, want)
			}
			if up, _, ok := overlayUplink(dir, nets); !ok || up != "eth0" {
				t.Errorf("the announcer's overlay with %v: %q, %v; want the uplink eth0 once the overlay is ready", nets, up, ok)
			}
		})
	}
	if got := lbAnnounceNetworks(nil); got != nil {
		t.Errorf("lbAnnounceNetworks(nil) = %v, want none", got)
	}
}
