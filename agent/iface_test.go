package agent

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// ifaceNode is a namespace with three interfaces, as a node with two NICs
// and a bond-like name:
//
//	eth0  192.0.2.10/24 2001:db8:0:1::10/64    default routes (v4 and v6)
//	eth1  198.51.100.10/24 2001:db8:0:2::10/64 route to 203.0.113.0/24 via 198.51.100.1
//	ens5  10.9.0.5/24 (no IPv6)
func ifaceNode(t *testing.T) *netops.Handle {
	t.Helper()
	if !testenv.Root() {
		t.Skip("needs root")
	}
	node, other := nstest.NewNS(t, "ifc-node"), nstest.NewNS(t, "ifc-peer")
	h, err := netops.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	p, err := netops.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for i, l := range []struct {
		name  string
		addrs []string
	}{
		{"eth0", []string{"192.0.2.10/24", "2001:db8:0:1::10/64"}},
		{"eth1", []string{"198.51.100.10/24", "2001:db8:0:2::10/64"}},
		{"ens5", []string{"10.9.0.5/24"}},
	} {
		if _, _, err := p.EnsureVeth(netops.VethOpts{HostName: "pe" + string(rune('0'+i)), PeerName: l.name, Peer: h, MTU: 1500 - 100*i}); err != nil {
			t.Fatal(err)
		}
		for _, a := range l.addrs {
			if err := h.EnsureAddr(l.name, netip.MustParsePrefix(a), netops.AddrOpts{NoDAD: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range []netops.Route{
		{GW: netip.MustParseAddr("192.0.2.1"), Dev: "eth0"},
		{GW: netip.MustParseAddr("2001:db8:0:1::1"), Dev: "eth0"},
		{Dst: netip.MustParsePrefix("203.0.113.0/24"), GW: netip.MustParseAddr("198.51.100.1"), Dev: "eth1"},
	} {
		if err := h.EnsureRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestFindUnderlay: the interface and addresses flanneld's pkg/ipmatch
// would choose, for each way of naming it.
func TestFindUnderlay(t *testing.T) {
	h := ifaceNode(t)
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name         string
		o            InterfaceOpts
		v4, v6       bool
		iface        string
		addr4, pub4  string
		addr6, pub6  string
		mtu          int
		errSubstring string
	}{
		{name: "default route", v4: true, iface: "eth0", addr4: "192.0.2.10", pub4: "192.0.2.10", mtu: 1500},
		{name: "default route dual", v4: true, v6: true, iface: "eth0", addr4: "192.0.2.10", pub4: "192.0.2.10", addr6: "2001:db8:0:1::10", pub6: "2001:db8:0:1::10"},
		{name: "by name", o: InterfaceOpts{Ifaces: []string{"eth1"}}, v4: true, iface: "eth1", addr4: "198.51.100.10", pub4: "198.51.100.10", mtu: 1400},
		{name: "by address", o: InterfaceOpts{Ifaces: []string{"10.9.0.5"}}, v4: true, iface: "ens5", addr4: "10.9.0.5", pub4: "10.9.0.5", mtu: 1300},
		// Repeated --iface: the first that exists wins (flanneld keeps them all, in order).
		{name: "first match of several", o: InterfaceOpts{Ifaces: []string{"wlan0", "203.0.113.9", "eth1", "eth0"}}, v4: true, iface: "eth1", addr4: "198.51.100.10", pub4: "198.51.100.10"},
		// --iface before --iface-regex.
		{name: "iface before regex", o: InterfaceOpts{Ifaces: []string{"eth1"}, Regexes: []string{"^ens"}}, v4: true, iface: "eth1", addr4: "198.51.100.10", pub4: "198.51.100.10"},
		// A regex matches addresses first, then names.
		{name: "regex on an address", o: InterfaceOpts{Regexes: []string{`^198\.51\.`}}, v4: true, iface: "eth1", addr4: "198.51.100.10", pub4: "198.51.100.10"},
		{name: "regex on a name", o: InterfaceOpts{Regexes: []string{"^ens[0-9]"}}, v4: true, iface: "ens5", addr4: "10.9.0.5", pub4: "10.9.0.5"},
		{name: "regexes in order", o: InterfaceOpts{Regexes: []string{"^nomatch", "^eth1$"}}, v4: true, iface: "eth1", addr4: "198.51.100.10", pub4: "198.51.100.10"},
		// Dual stack: an interface needs a matching address of each family.
		{name: "regex dual", o: InterfaceOpts{Regexes: []string{`^(198\.51|2001:db8:0:2:)`}}, v4: true, v6: true, iface: "eth1", addr4: "198.51.100.10", pub4: "198.51.100.10", addr6: "2001:db8:0:2::10", pub6: "2001:db8:0:2::10"},
		{name: "can reach", o: InterfaceOpts{CanReach: "203.0.113.7"}, v4: true, iface: "eth1", addr4: "198.51.100.10", pub4: "198.51.100.10"},
		{name: "can reach by the default route", o: InterfaceOpts{CanReach: "8.8.8.8"}, v4: true, iface: "eth0", addr4: "192.0.2.10", pub4: "192.0.2.10"},
		// --public-ip alone picks the interface that holds it.
		{name: "public ip picks its interface", o: InterfaceOpts{PublicIP: a("10.9.0.5")}, v4: true, iface: "ens5", addr4: "10.9.0.5", pub4: "10.9.0.5"},
		{name: "public ip not held", o: InterfaceOpts{PublicIP: a("203.0.113.5")}, v4: true, errSubstring: "--public-ip 203.0.113.5: no interface holds this address"},
		// With --iface, --public-ip is only what is published (NAT).
		{name: "iface and NATed public ip", o: InterfaceOpts{Ifaces: []string{"eth1"}, PublicIP: a("203.0.113.5")}, v4: true, iface: "eth1", addr4: "198.51.100.10", pub4: "203.0.113.5"},
		{name: "public ipv6 on another interface", o: InterfaceOpts{Ifaces: []string{"192.0.2.10"}, PublicIPv6: a("2001:db8:0:2::10")}, v4: true, v6: true, errSubstring: "must be the IPv4 interface eth0"},
		{name: "public ipv6 on the same interface", o: InterfaceOpts{Ifaces: []string{"192.0.2.10"}, PublicIPv6: a("2001:db8:0:1::10")}, v4: true, v6: true, iface: "eth0", addr4: "192.0.2.10", pub4: "192.0.2.10", addr6: "2001:db8:0:1::10", pub6: "2001:db8:0:1::10"},
		{name: "nothing matches", o: InterfaceOpts{Ifaces: []string{"wlan0"}, Regexes: []string{"^wl"}}, v4: true, errSubstring: "--iface wlan0: no such interface; --iface-regex ^wl matches no interface"},
		{name: "no IPv6 on the interface", o: InterfaceOpts{Ifaces: []string{"ens5"}}, v4: true, v6: true, errSubstring: "ens5 has no global IPv6 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if err := o.Compile(); err != nil {
				t.Fatal(err)
			}
			u, err := findUnderlay(h, o, tc.v4, tc.v6)
			if tc.errSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSubstring) {
					t.Fatalf("err %v, want one containing %q", err, tc.errSubstring)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			str := func(x netip.Addr) string {
				if !x.IsValid() {
					return ""
				}
				return x.String()
			}
			if u.Iface != tc.iface || str(u.Addr4.Addr()) != tc.addr4 || str(u.Public4) != tc.pub4 ||
				str(u.Addr6.Addr()) != tc.addr6 || str(u.Public6) != tc.pub6 || (tc.mtu != 0 && u.MTU != tc.mtu) {
				t.Errorf("underlay %+v; want %s %s (public %s) %s (public %s) mtu %d", u, tc.iface, tc.addr4, tc.pub4, tc.addr6, tc.pub6, tc.mtu)
			}
		})
	}
}

// TestInterfaceOptsCompile: a bad expression or can-reach address names
// its flag.
func TestInterfaceOptsCompile(t *testing.T) {
	for _, tc := range []struct {
		o    InterfaceOpts
		want string
	}{
		{InterfaceOpts{Regexes: []string{"eth[0-"}}, "--iface-regex"},
		{InterfaceOpts{CanReach: "gateway"}, "--iface-can-reach"},
	} {
		if err := tc.o.Compile(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.o, err, tc.want)
		}
	}
}
