package cloudipam

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/cnibox/cnibox/store"
)

func TestMerge(t *testing.T) {
	p := netip.MustParsePrefix("10.240.0.0/16")
	q := netip.MustParsePrefix("10.241.0.0/16")
	nic := func(mac string, s netip.Prefix, a, v []netip.Addr) CloudNIC {
		return CloudNIC{MAC: mac, Name: "eth0", Subnet: s, Addrs: a, Vanished: v}
	}
	ip := netip.MustParseAddr
	inUse := func(held ...string) func(netip.Addr) bool {
		m := map[netip.Addr]bool{}
		for _, h := range held {
			m[ip(h)] = true
		}
		return func(a netip.Addr) bool { return m[a] }
	}
	tests := []struct {
		name       string
		old, fresh []CloudNIC
		held       []string
		want       []CloudNIC
	}{
		{"first answer", nil, []CloudNIC{nic("m", p, addrs(36, 38), nil)}, nil,
			[]CloudNIC{nic("m", p, addrs(36, 38), nil)}},
		{"new addresses come, vanished free ones go", []CloudNIC{nic("m", p, addrs(36, 38), nil)},
			[]CloudNIC{nic("m", p, addrs(37, 40), nil)}, []string{"10.240.0.37"},
			[]CloudNIC{nic("m", p, addrs(37, 40), nil)}},
		{"vanished in-use ones stay until released", []CloudNIC{nic("m", p, addrs(36, 38), nil)},
			[]CloudNIC{nic("m", p, addrs(38, 39), nil)}, []string{"10.240.0.36"},
			[]CloudNIC{nic("m", p, addrs(38, 39), addrs(36, 36))}},
		{"still vanished on the next refresh", []CloudNIC{nic("m", p, addrs(38, 39), addrs(36, 36))},
			[]CloudNIC{nic("m", p, addrs(38, 39), nil)}, []string{"10.240.0.36"},
			[]CloudNIC{nic("m", p, addrs(38, 39), addrs(36, 36))}},
		{"listed again: no longer vanished", []CloudNIC{nic("m", p, addrs(38, 39), addrs(36, 36))},
			[]CloudNIC{nic("m", p, addrs(36, 39), nil)}, []string{"10.240.0.36"},
			[]CloudNIC{nic("m", p, addrs(36, 39), nil)}},
		{"a whole NIC gone while in use", []CloudNIC{nic("m", p, addrs(36, 37), nil), nic("n", q, []netip.Addr{ip("10.241.0.5")}, nil)},
			[]CloudNIC{nic("m", p, addrs(36, 37), nil)}, []string{"10.241.0.5"},
			[]CloudNIC{nic("m", p, addrs(36, 37), nil), nic("n", q, nil, []netip.Addr{ip("10.241.0.5")})}},
		{"moved to another NIC: not vanished", []CloudNIC{nic("m", p, addrs(36, 37), nil)},
			[]CloudNIC{nic("m", p, addrs(36, 36), nil), nic("n", p, addrs(37, 37), nil)}, []string{"10.240.0.37"},
			[]CloudNIC{nic("m", p, addrs(36, 36), nil), nic("n", p, addrs(37, 37), nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := merge(tt.old, tt.fresh, inUse(tt.held...))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("merge =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	p := netip.MustParsePrefix("10.240.0.0/16")
	q := netip.MustParsePrefix("10.241.0.0/16")
	v := netip.MustParseAddr("10.241.0.5")
	c := CloudCache{NICs: []CloudNIC{
		{MAC: "m", Subnet: p, Addrs: addrs(38, 39), Vanished: addrs(36, 36)},
		{MAC: "n", Subnet: q, Vanished: []netip.Addr{v}},
	}}
	if prune(&c, []store.Reservation{{Addr: netip.MustParseAddr("10.240.0.38")}}) {
		t.Error("releasing a listed address changed the cache")
	}
	if !prune(&c, []store.Reservation{{Addr: addrs(36, 36)[0]}, {Addr: v}}) {
		t.Fatal("releasing vanished addresses did not change the cache")
	}
	want := []CloudNIC{{MAC: "m", Subnet: p, Addrs: addrs(38, 39), Vanished: []netip.Addr{}}}
	if len(c.NICs) != 1 || !reflect.DeepEqual(c.NICs[0].Addrs, want[0].Addrs) || len(c.NICs[0].Vanished) != 0 {
		t.Errorf("after prune %+v, want %+v", c.NICs, want)
	}
}

func TestPoolsFromCache(t *testing.T) {
	c := &config{Provider: ProviderAzure}
	cache := &CloudCache{NICs: []CloudNIC{{MAC: "000d3a51c490", Name: "eth0", Subnet: netip.MustParsePrefix("10.240.0.0/16"), Addrs: addrs(36, 37), Vanished: addrs(30, 30)}}}
	ps := pools(c, cache)
	if len(ps) != 1 || ps[0].Owner != "NIC 00:0d:3a:51:c4:90" || ps[0].What != "secondary IPs" || len(ps[0].Addrs) != 3 {
		t.Errorf("pools = %+v", ps)
	}
	if want := "release addresses (DEL, cnibox gc) or assign more secondary IPs to the NIC in Azure (ipConfigurations) (eth0 on this node)"; ps[0].Fix != want {
		t.Errorf("fix %q", ps[0].Fix)
	}
}
