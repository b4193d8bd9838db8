package cli

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/roles"
	"github.com/cnibox/cnibox/store"
)

// TestBuildIPAMNetwork: configured ranges, ranges known only from the
// store's cursors (with the subnet of their reservations), cloud pools with
// their last refresh, and reservations joined with their endpoints.
func TestBuildIPAMNetwork(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	fetched := time.Unix(1700000000, 0)
	v := store.IPAMView{
		Network: "n",
		Reservations: []store.Reservation{
			{Addr: a("10.1.0.5"), Network: "n", ContainerID: "c1", IfName: "eth0", Subnet: p("10.1.0.0/24")},
			{Addr: a("10.2.0.12"), Network: "n", ContainerID: "c2", IfName: "eth0", Subnet: p("10.2.0.0/24"), BootID: "old"},
			{Addr: a("10.3.0.7"), Network: "n", ContainerID: "c3", IfName: "eth0", Subnet: p("10.3.0.0/24")},
		},
		Cursors: []store.IPAMCursor{
			{SetID: "10.1.0.1-10.1.0.254", Last: a("10.1.0.5")},
			{SetID: "10.2.0.10-10.2.0.20,10.2.1.1-10.2.1.2", Last: a("10.2.0.12")},
		},
		// What cloud IPAM keeps beside the reservations (its last answer
		// of the provider), which its declaration turns into pools.
		Kept: map[string][]byte{"cloud/pool": []byte(`{"provider":"azure","source":"http://168.63.129.16","fetched":"` +
			fetched.UTC().Format(time.RFC3339) + `","nics":[{"mac":"000d3a51c490","name":"eth0","subnet":"10.3.0.0/24","addrs":["10.3.0.6","10.3.0.7","10.3.0.8"]}]}`)},
	}
	configured := []ipamPool{{Range: "10.1.0.1-10.1.0.254", Subnet: p("10.1.0.0/24"), Gateway: a("10.1.0.1"), Source: "/etc/cni/net.d/10.conflist",
		start: a("10.1.0.1"), end: a("10.1.0.254")}}
	eps := []store.Endpoint{{Network: "n", ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/c1"}}
	n := buildIPAMNetwork(roles.Registry(), "n", v, configured, eps)

	if len(n.Pools) != 4 {
		t.Fatalf("pools = %+v, want the configured range, two from the cursor, one cloud NIC", n.Pools)
	}
	if c := n.Pools[0]; c.Source != "/etc/cni/net.d/10.conflist" || c.LastAllocated != a("10.1.0.5") {
		t.Errorf("configured pool = %+v", c)
	}
	if s := n.Pools[1]; s.Range != "10.2.0.10-10.2.0.20" || s.Source != "store" || s.Subnet != p("10.2.0.0/24") || s.LastAllocated != a("10.2.0.12") {
		t.Errorf("store pool = %+v", s)
	}
	if s := n.Pools[2]; s.Range != "10.2.1.1-10.2.1.2" || s.Subnet.IsValid() {
		t.Errorf("second store pool = %+v (no reservation tells its subnet)", s)
	}
	if c := n.Pools[3]; c.Source != "cloud azure http://168.63.129.16" || c.Size != 3 || c.Used != 1 || c.Free != 2 || !c.Refreshed.Equal(fetched) || c.Subnet != p("10.3.0.0/24") {
		t.Errorf("cloud pool = %+v", c)
	}
	if r := n.Reservations[0]; !r.Endpoint || r.Netns != "/run/netns/c1" {
		t.Errorf("reservation with an endpoint = %+v", r)
	}
	if r := n.Reservations[1]; r.Endpoint || !r.EarlierBoot && store.BootID() != "" {
		t.Errorf("reservation from an earlier boot = %+v", r)
	}
}

func TestRangeSize(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		start, end, gw string
		want           uint64
	}{
		{"10.0.0.1", "10.0.0.254", "10.0.0.1", 253},
		{"10.0.0.1", "10.0.0.254", "10.1.0.1", 254},
		{"fd00::1", "fd00::ffff", "fd00::1", 0xfffe},
		{"fd00::", "fd00::ffff:ffff:ffff:ffff", "fd00::1", ^uint64(0)},
		{"fd00::", "fd00:0:0:1::", "", ^uint64(0)},
	} {
		var gw netip.Addr
		if tc.gw != "" {
			gw = a(tc.gw)
		}
		if got := rangeSize(a(tc.start), a(tc.end), gw); got != tc.want {
			t.Errorf("rangeSize(%s, %s, %s) = %d, want %d", tc.start, tc.end, tc.gw, got, tc.want)
		}
	}
}
