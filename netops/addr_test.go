package netops_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
)

// podWithEth0 returns a host and a pod namespace joined by a veth pair whose
// pod end is eth0.
func podWithEth0(t *testing.T) (host, pod *netops.Handle) {
	t.Helper()
	host = openNS(t, "h")
	pod = openNS(t, "p")
	_, _, err := host.EnsureVeth(netops.VethOpts{HostName: "veth0", PeerName: "eth0", Peer: pod})
	must(t, err)
	return host, pod
}

func TestAddrs(t *testing.T) {
	_, pod := podWithEth0(t)
	addrs := []struct {
		p    netip.Prefix
		opts netops.AddrOpts
	}{
		{netip.MustParsePrefix("10.99.0.2/24"), netops.AddrOpts{}},
		{netip.MustParsePrefix("10.98.0.2/16"), netops.AddrOpts{}},
		{netip.MustParsePrefix("fd00:99::2/64"), netops.AddrOpts{NoDAD: true}},
		{netip.MustParsePrefix("fe80::1234/64"), netops.AddrOpts{NoDAD: true}},
	}
	for _, a := range addrs {
		t.Run("ensure "+a.p.String(), func(t *testing.T) {
			must(t, pod.EnsureAddr("eth0", a.p, a.opts))
			must(t, pod.EnsureAddr("eth0", a.p, a.opts))
		})
	}
	got, err := pod.Addrs("eth0")
	must(t, err)
	want := []netip.Prefix{addrs[0].p, addrs[1].p, addrs[2].p}
	if !sameSet(got, want) {
		t.Errorf("Addrs(eth0) = %v, want %v", got, want)
	}
	all, err := pod.AllAddrs("eth0")
	must(t, err)
	if !slices.Contains(all, addrs[3].p) {
		t.Errorf("AllAddrs(eth0) = %v, missing %v", all, addrs[3].p)
	}
	every, err := pod.Addrs("")
	must(t, err)
	if !slices.Contains(every, netip.MustParsePrefix("127.0.0.1/8")) || !slices.Contains(every, addrs[0].p) {
		t.Errorf("Addrs(\"\") = %v, want lo's and eth0's", every)
	}

	for _, a := range addrs {
		t.Run("delete "+a.p.String(), func(t *testing.T) {
			must(t, pod.DeleteAddr("eth0", a.p))
			must(t, pod.DeleteAddr("eth0", a.p))
		})
	}
	got, err = pod.AllAddrs("eth0")
	must(t, err)
	for _, a := range addrs {
		if slices.Contains(got, a.p) {
			t.Errorf("%v still on eth0 after DeleteAddr: %v", a.p, got)
		}
	}

	if err := pod.EnsureAddr("nope0", addrs[0].p, netops.AddrOpts{}); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("EnsureAddr(missing link) = %v, want ErrNotFound", err)
	}
	must(t, pod.DeleteAddr("nope0", addrs[0].p))
}

func TestRoutes(t *testing.T) {
	_, pod := podWithEth0(t)
	must(t, pod.EnsureAddr("eth0", netip.MustParsePrefix("10.99.0.2/24"), netops.AddrOpts{}))
	must(t, pod.EnsureAddr("eth0", netip.MustParsePrefix("fd00:99::2/64"), netops.AddrOpts{NoDAD: true}))
	gw4, gw6 := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("fd00:99::1")

	routes := []struct {
		name string
		r    netops.Route
		want netops.Route // as Routes reports it
	}{
		{
			name: "default v4",
			r:    netops.Route{GW: gw4, Dev: "eth0"},
			want: netops.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: gw4, Dev: "eth0"},
		},
		{
			name: "default v6",
			r:    netops.Route{Dst: netip.MustParsePrefix("::/0"), GW: gw6, Dev: "eth0"},
			want: netops.Route{Dst: netip.MustParsePrefix("::/0"), GW: gw6, Dev: "eth0", Priority: 1024},
		},
		{
			name: "subnet via gateway with mtu and metric",
			r:    netops.Route{Dst: netip.MustParsePrefix("10.50.0.0/16"), GW: gw4, MTU: 1400, Priority: 50},
			want: netops.Route{Dst: netip.MustParsePrefix("10.50.0.0/16"), GW: gw4, Dev: "eth0", MTU: 1400, Priority: 50},
		},
		{
			name: "scope link with source",
			r:    netops.Route{Dst: netip.MustParsePrefix("10.60.0.0/24"), Dev: "eth0", ScopeLink: true, Src: netip.MustParseAddr("10.99.0.2")},
			want: netops.Route{Dst: netip.MustParsePrefix("10.60.0.0/24"), Dev: "eth0", ScopeLink: true, Src: netip.MustParseAddr("10.99.0.2")},
		},
		{
			name: "onlink gateway",
			r:    netops.Route{Dst: netip.MustParsePrefix("10.70.0.0/24"), GW: netip.MustParseAddr("10.200.0.1"), Dev: "eth0", Onlink: true},
			want: netops.Route{Dst: netip.MustParsePrefix("10.70.0.0/24"), GW: netip.MustParseAddr("10.200.0.1"), Dev: "eth0", Onlink: true},
		},
		{
			name: "table",
			r:    netops.Route{Dst: netip.MustParsePrefix("10.80.0.0/24"), GW: gw4, Dev: "eth0", Table: 100},
		},
	}
	for _, tt := range routes {
		t.Run("ensure "+tt.name, func(t *testing.T) {
			must(t, pod.EnsureRoute(tt.r))
			must(t, pod.EnsureRoute(tt.r))
		})
	}
	got, err := pod.Routes("eth0")
	must(t, err)
	for _, tt := range routes {
		if tt.want.Dst.IsValid() && !slices.Contains(got, tt.want) {
			t.Errorf("Routes(eth0) = %v\nmissing %v", got, tt.want)
		}
	}
	for _, r := range got {
		if r.Table != 0 {
			t.Errorf("Routes reported a route of table %d: %v", r.Table, r)
		}
	}
	all, err := pod.Routes("")
	must(t, err)
	if !slices.Contains(all, routes[0].want) {
		t.Errorf("Routes(\"\") = %v, missing %v", all, routes[0].want)
	}

	t.Run("replace", func(t *testing.T) {
		other := netops.Route{GW: netip.MustParseAddr("10.99.0.3"), Dev: "eth0"}
		must(t, pod.EnsureRoute(other))
		got, err := pod.Routes("eth0")
		must(t, err)
		var defaults []netops.Route
		for _, r := range got {
			if r.Dst == netip.MustParsePrefix("0.0.0.0/0") {
				defaults = append(defaults, r)
			}
		}
		if len(defaults) != 1 || defaults[0].GW != other.GW {
			t.Errorf("default routes after replace = %v, want only via %v", defaults, other.GW)
		}
		must(t, pod.EnsureRoute(routes[0].r))
	})

	for _, tt := range routes {
		t.Run("delete "+tt.name, func(t *testing.T) {
			must(t, pod.DeleteRoute(tt.r))
			must(t, pod.DeleteRoute(tt.r))
		})
	}
	got, err = pod.Routes("eth0")
	must(t, err)
	for _, tt := range routes {
		if tt.want.Dst.IsValid() && slices.Contains(got, tt.want) {
			t.Errorf("route %v still there after DeleteRoute", tt.want)
		}
	}
	must(t, pod.DeleteRoute(netops.Route{Dst: netip.MustParsePrefix("10.1.0.0/16"), Dev: "nope0"}))
	if err := pod.EnsureRoute(netops.Route{Dev: "eth0"}); err == nil {
		t.Error("EnsureRoute without destination and gateway succeeded")
	}
}

// sameSet reports whether a and b hold the same prefixes, in any order.
func sameSet(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		if !slices.Contains(b, p) {
			return false
		}
	}
	return true
}
