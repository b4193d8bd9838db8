package wbpool

import (
	"net/netip"
	"strings"
	"testing"
)

// The expectations below are whereabouts v0.9.4's: its TestIPPoolName
// (pkg/storage/kubernetes), its allocate tests (pkg/allocate) and the
// behaviour of its iphelpers and NormalizeIP, case by case.

func TestPoolName(t *testing.T) {
	for _, tc := range []struct{ rng, network, node, want string }{
		{"10.0.0.0/8", "", "", "10.0.0.0-8"},
		{"10.0.0.0/8", "test", "", "test-10.0.0.0-8"},
		{"10.0.0.0/8", "", "testnode", "testnode-10.0.0.0-8"},
		{"10.0.0.0/8", "testnetwork", "testnode", "testnetwork-testnode-10.0.0.0-8"},
		{"fd00::/64", "", "", "fd00---64"},
		{"2001:db8:1::/120", "lan", "", "lan-2001-db8-1---120"},
	} {
		if got := PoolName(tc.rng, tc.network, tc.node); got != tc.want {
			t.Errorf("PoolName(%q, %q, %q) = %q, want %q", tc.rng, tc.network, tc.node, got, tc.want)
		}
	}
}

func TestReservationName(t *testing.T) {
	for _, tc := range []struct{ ip, network, want string }{
		{"192.168.1.5", "", "192.168.1.5"},
		{"192.168.1.5", "blue", "blue-192.168.1.5"},
		{"fd00::5", "", "fd00--5"},
		{"fd00::", "", "fd00--0"}, // a trailing ":" gets a "0"
		{"2001:db8::1:0", "red", "red-2001-db8--1-0"},
	} {
		if got := ReservationName(netip.MustParseAddr(tc.ip), tc.network); got != tc.want {
			t.Errorf("ReservationName(%s, %q) = %q, want %q", tc.ip, tc.network, got, tc.want)
		}
	}
}

func TestOffsets(t *testing.T) {
	for _, tc := range []struct{ base, ip, off string }{
		{"10.0.0.0", "10.0.0.1", "1"},
		{"10.0.0.0", "10.0.1.0", "256"},
		{"192.168.2.224", "192.168.2.230", "6"},
		{"fd00::", "fd00::1:0", "65536"},
		{"fd00::", "fd00::ffff:ffff:ffff:ffff", "18446744073709551615"},
	} {
		base, ip := netip.MustParseAddr(tc.base), netip.MustParseAddr(tc.ip)
		off, err := Offset(base, ip)
		if err != nil || off != tc.off {
			t.Errorf("Offset(%s, %s) = %q, %v; want %q", base, ip, off, err, tc.off)
		}
		back, ok := AddrAt(base, off)
		if !ok || back != ip {
			t.Errorf("AddrAt(%s, %s) = %s, %v; want %s", base, off, back, ok, ip)
		}
	}
	for _, bad := range []string{"x", "-1", "4294967295", "18446744073709551616"} {
		if a, ok := AddrAt(netip.MustParseAddr("10.0.0.0"), bad); ok {
			t.Errorf("AddrAt(10.0.0.0, %q) = %s; want no address (whereabouts skips the key)", bad, a)
		}
	}
	if _, err := Offset(netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("fd00::1")); err == nil {
		t.Error("Offset across families: no error")
	}
}

func rng(t *testing.T, cidr, start, end string, exclude ...string) Range {
	t.Helper()
	r := Range{Prefix: netip.MustParsePrefix(cidr).Masked()}
	if start != "" {
		r.Start = netip.MustParseAddr(start)
	}
	if end != "" {
		r.End = netip.MustParseAddr(end)
	}
	for _, x := range exclude {
		p, err := ParseExclude(x)
		if err != nil {
			t.Fatal(err)
		}
		r.Exclude = append(r.Exclude, p)
	}
	return r
}

func TestLowest(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cidr       string
		start, end string
		exclude    []string
		taken      []string
		want       string // "" = exhausted
	}{
		{"v4", "192.168.1.0/24", "", "", nil, nil, "192.168.1.1"},
		{"v6 no leading zeroes", "caa5::/112", "", "", nil, nil, "caa5::1"},
		{"v6 all leading zeroes", "::/64", "", "", nil, nil, "::1"},
		{"v6 two leading zeroes", "fd::/64", "", "", nil, nil, "fd::1"},
		{"v6 leading zeroes", "100::2:0/112", "", "", nil, nil, "100::2:1"},
		{"v4 exclude a range", "192.168.0.0/24", "", "", []string{"192.168.0.0/30"}, nil, "192.168.0.4"},
		{"v4 exclude one address", "192.168.0.0/24", "", "", []string{"192.168.0.1"}, nil, "192.168.0.2"},
		{"v6 exclude a range", "100::2:0/112", "", "", []string{"100::2:1/126"}, nil, "100::2:4"},
		{"v6 exclude one address", "100::2:0/112", "", "", []string{"100::2:1"}, nil, "100::2:2"},
		{"v6 exclude a very large range", "2001:db8::/30", "", "", []string{"2001:db8::0/32"}, nil, "2001:db9::"},
		{"v4 unsorted excludes", "192.168.0.0/28", "", "", []string{"192.168.0.0/30", "192.168.0.6/31", "192.168.0.8/31", "192.168.0.4/30"}, nil, "192.168.0.10"},
		{"v4 unsorted excludes 2", "192.168.0.0/28", "", "", []string{"192.168.0.0/30", "192.168.0.14/31", "192.168.0.4/30", "192.168.0.6/31", "192.168.0.8/31"}, nil, "192.168.0.10"},
		{"v4 excluded and taken", "192.168.0.0/29", "", "", []string{"192.168.0.0/30"}, []string{"192.168.0.4", "192.168.0.5", "192.168.0.6"}, ""},
		{"v4 last excluded", "192.168.0.0/29", "", "", []string{"192.168.0.4/30"}, []string{"192.168.0.1", "192.168.0.2", "192.168.0.3"}, ""},
		{"v6 last excluded", "100::2:0/125", "", "", []string{"100::2:4/126"}, []string{"100::2:1", "100::2:2", "100::2:3"}, ""},
		{"start is the network address: ignored", "192.168.0.0/29", "192.168.0.0", "", nil, nil, "192.168.0.1"},
		{"start and end outside: ignored", "192.168.0.0/29", "192.168.0.0", "192.168.0.8", nil, nil, "192.168.0.1"},
		{"end inside an excluded range", "192.168.0.0/28", "192.168.0.1", "192.168.0.6", []string{"192.168.0.4/30"}, []string{"192.168.0.1", "192.168.0.2", "192.168.0.3"}, ""},
		{"start and end", "10.0.0.0/24", "10.0.0.10", "10.0.0.11", nil, []string{"10.0.0.10"}, "10.0.0.11"},
		{"end below start: ignored", "10.0.0.0/24", "10.0.0.200", "10.0.0.100", nil, nil, "10.0.0.200"},
		{"broadcast never", "10.0.0.0/30", "", "", nil, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"/31 has none", "10.0.0.0/31", "", "", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rng(t, tc.cidr, tc.start, tc.end, tc.exclude...)
			taken := map[netip.Addr]bool{}
			for _, s := range tc.taken {
				taken[netip.MustParseAddr(s)] = true
			}
			got, ok := r.Lowest(func(a netip.Addr) bool { return taken[a] })
			if tc.want == "" {
				if ok {
					t.Fatalf("Lowest = %s; want the range exhausted", got)
				}
				return
			}
			if !ok || got.String() != tc.want {
				t.Fatalf("Lowest = %s, %v; want %s", got, ok, tc.want)
			}
			if !r.Usable(got) {
				t.Errorf("Usable(%s) = false for the address Lowest picked", got)
			}
		})
	}
}

func TestParseExclude(t *testing.T) {
	for in, want := range map[string]string{
		"192.168.2.229/30": "192.168.2.228/30",
		"10.0.0.7":         "10.0.0.7/32",
		"fd00::7":          "fd00::7/128",
	} {
		got, err := ParseExclude(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseExclude(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"192.168.0.1/123", "nope", ""} {
		if p, err := ParseExclude(bad); err == nil {
			t.Errorf("ParseExclude(%q) = %s; want an error", bad, p)
		}
	}
}

func TestDivideRange(t *testing.T) {
	got, err := DivideRange(netip.MustParsePrefix("10.0.0.0/8"), "/10")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, p := range got {
		s = append(s, p.String())
	}
	if want := "10.0.0.0/10 10.64.0.0/10 10.128.0.0/10 10.192.0.0/10"; strings.Join(s, " ") != want {
		t.Errorf("DivideRange(10.0.0.0/8, /10) = %v; want %s", s, want)
	}
	v6, err := DivideRange(netip.MustParsePrefix("fd00::/120"), "122")
	if err != nil || len(v6) != 4 || v6[3].String() != "fd00::c0/122" {
		t.Errorf("DivideRange(fd00::/120, 122) = %v, %v", v6, err)
	}
	for _, bad := range []struct{ rng, size string }{
		{"10.0.0.0/24", "/16"}, {"10.0.0.1/24", "/26"}, {"10.0.0.0/24", "x"}, {"10.0.0.0/8", "/30"},
	} {
		if _, err := DivideRange(netip.MustParsePrefix(bad.rng), bad.size); err == nil {
			t.Errorf("DivideRange(%s, %s): no error", bad.rng, bad.size)
		}
	}
}

func TestBroadcast(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/24": "10.0.0.255", "10.0.0.0/8": "10.255.255.255", "10.1.2.3/32": "10.1.2.3",
		"fd00::/64": "fd00::ffff:ffff:ffff:ffff", "0.0.0.0/0": "255.255.255.255",
	} {
		if got := Broadcast(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("Broadcast(%s) = %s, want %s", in, got, want)
		}
	}
}
