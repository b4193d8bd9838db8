package ipam

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/containernetworking/cni/pkg/types"
)

var (
	addr   = netip.MustParseAddr
	prefix = netip.MustParsePrefix
)

func TestRangeCanonicalizeDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Range
		want Range
	}{
		{"ipv4 /24", Range{Subnet: prefix("10.1.0.0/24")},
			Range{prefix("10.1.0.0/24"), addr("10.1.0.1"), addr("10.1.0.254"), addr("10.1.0.1")}},
		{"ipv4 /30", Range{Subnet: prefix("10.1.0.0/30")},
			Range{prefix("10.1.0.0/30"), addr("10.1.0.1"), addr("10.1.0.2"), addr("10.1.0.1")}},
		{"ipv6 /64 ends at the last address", Range{Subnet: prefix("fd00:1::/64")},
			Range{prefix("fd00:1::/64"), addr("fd00:1::1"), addr("fd00:1::ffff:ffff:ffff:ffff"), addr("fd00:1::1")}},
		{"ipv6 /126", Range{Subnet: prefix("fd00::/126")},
			Range{prefix("fd00::/126"), addr("fd00::1"), addr("fd00::3"), addr("fd00::1")}},
		{"explicit", Range{Subnet: prefix("10.1.0.0/16"), Start: addr("10.1.2.0"), End: addr("10.1.2.255"), Gateway: addr("10.1.255.254")},
			Range{prefix("10.1.0.0/16"), addr("10.1.2.0"), addr("10.1.2.255"), addr("10.1.255.254")}},
		{"start equals end", Range{Subnet: prefix("10.1.0.0/24"), Start: addr("10.1.0.9"), End: addr("10.1.0.9")},
			Range{prefix("10.1.0.0/24"), addr("10.1.0.9"), addr("10.1.0.9"), addr("10.1.0.1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.in
			if err := r.Canonicalize("r"); err != nil {
				t.Fatal(err)
			}
			if r != tt.want {
				t.Errorf("got %+v, want %+v", r, tt.want)
			}
		})
	}
}

func TestRangeCanonicalizeErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    Range
		code  uint
		field string
		words []string
	}{
		{"no subnet", Range{}, 7, "r.subnet", []string{"missing"}},
		{"ipv4 /31", Range{Subnet: prefix("10.1.0.0/31")}, 7, "r.subnet", []string{"10.1.0.0/31", "too small", "/30"}},
		{"ipv4 /32", Range{Subnet: prefix("10.1.0.0/32")}, 7, "r.subnet", []string{"too small"}},
		{"ipv6 /127", Range{Subnet: prefix("fd00::/127")}, 7, "r.subnet", []string{"too small", "/126"}},
		{"ipv6 /128", Range{Subnet: prefix("fd00::/128")}, 7, "r.subnet", []string{"too small"}},
		{"host bits", Range{Subnet: prefix("10.1.0.5/24")}, 7, "r.subnet", []string{"10.1.0.5/24", "did you mean 10.1.0.0/24"}},
		{"mapped subnet", Range{Subnet: prefix("::ffff:10.1.0.0/120")}, 2, "r.subnet", []string{"IPv4-mapped"}},
		{"multicast subnet", Range{Subnet: prefix("224.0.0.0/24")}, 2, "r.subnet", []string{"multicast"}},
		{"start outside", Range{Subnet: prefix("10.1.0.0/24"), Start: addr("10.2.0.5")}, 7, "r.rangeStart", []string{"10.2.0.5", "outside subnet 10.1.0.0/24"}},
		{"end outside", Range{Subnet: prefix("10.1.0.0/24"), End: addr("10.1.1.5")}, 7, "r.rangeEnd", []string{"10.1.1.5", "outside"}},
		{"gateway outside", Range{Subnet: prefix("10.1.0.0/24"), Gateway: addr("10.9.0.1")}, 7, "r.gateway", []string{"10.9.0.1", "outside"}},
		{"family mismatch", Range{Subnet: prefix("10.1.0.0/24"), Start: addr("fd00::1")}, 7, "r.rangeStart", []string{"fd00::1", "outside"}},
		{"start is network", Range{Subnet: prefix("10.1.0.0/24"), Start: addr("10.1.0.0")}, 7, "r.rangeStart", []string{"network address", "10.1.0.1 or later"}},
		{"v6 start is network", Range{Subnet: prefix("fd00::/64"), Start: addr("fd00::")}, 7, "r.rangeStart", []string{"network address"}},
		{"end is broadcast", Range{Subnet: prefix("10.1.0.0/24"), End: addr("10.1.0.255")}, 7, "r.rangeEnd", []string{"broadcast", "10.1.0.254 or earlier"}},
		{"gateway is broadcast", Range{Subnet: prefix("10.1.0.0/24"), Gateway: addr("10.1.0.255")}, 7, "r.gateway", []string{"broadcast"}},
		{"start after end", Range{Subnet: prefix("10.1.0.0/24"), Start: addr("10.1.0.9"), End: addr("10.1.0.5")}, 7, "r.rangeEnd", []string{"10.1.0.5", "before rangeStart 10.1.0.9", "swap"}},
		{"only the gateway", Range{Subnet: prefix("10.1.0.0/24"), Start: addr("10.1.0.1"), End: addr("10.1.0.1")}, 7, "r.rangeStart", []string{"only the gateway"}},
		{"zoned start", Range{Subnet: prefix("fe80::/64"), Start: addr("fe80::5%eth0")}, 2, "r.rangeStart", []string{"zoned"}},
		{"mapped gateway", Range{Subnet: prefix("10.1.0.0/24"), Gateway: addr("::ffff:10.1.0.1")}, 2, "r.gateway", []string{"IPv4-mapped"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.in
			err := r.Canonicalize("r")
			checkErr(t, err, tt.code, append([]string{`"` + tt.field + `"`}, tt.words...)...)
		})
	}
}

func checkErr(t *testing.T, err error, code uint, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want code %d", code)
	}
	if got := cniplug.CodeOf(err); got != code {
		t.Errorf("code %d, want %d (%v)", got, code, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q lacks %q", err, w)
		}
	}
}

func TestParseSets(t *testing.T) {
	tests := []struct {
		name  string
		in    [][]RangeConfig
		code  uint // 0: no error
		words []string
	}{
		{"one", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}}}, 0, nil},
		{"dual stack", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}}, {{Subnet: "fd00::/64"}}}, 0, nil},
		{"two subnets in a set", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}, {Subnet: "10.2.0.0/24"}}}, 0, nil},
		{"two ranges of one subnet", [][]RangeConfig{{{Subnet: "10.1.0.0/24", RangeEnd: "10.1.0.99"}, {Subnet: "10.1.0.0/24", RangeStart: "10.1.0.100"}}}, 0, nil},
		{"bad cidr", [][]RangeConfig{{{Subnet: "10.1.0.0/33"}}}, 7, []string{`"x[0][0].subnet"`, `"10.1.0.0/33"`, "CIDR"}},
		{"bare address as subnet", [][]RangeConfig{{{Subnet: "10.1.0.0"}}}, 7, []string{`"x[0][0].subnet"`}},
		{"bad start", [][]RangeConfig{{{Subnet: "10.1.0.0/24", RangeStart: "10.1.0"}}}, 7, []string{`"x[0][0].rangeStart"`, `"10.1.0"`}},
		{"bad end", [][]RangeConfig{{{Subnet: "10.1.0.0/24", RangeEnd: "x"}}}, 7, []string{`"x[0][0].rangeEnd"`}},
		{"bad gateway", [][]RangeConfig{{{Subnet: "10.1.0.0/24", Gateway: "10.1.0.1/24"}}}, 7, []string{`"x[0][0].gateway"`}},
		{"missing subnet", [][]RangeConfig{{{RangeStart: "10.1.0.5"}}}, 7, []string{`"x[0][0].subnet"`, "missing"}},
		{"empty set", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}}, {}}, 7, []string{`"x[1]"`, "empty range set"}},
		{"mixed family", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}, {Subnet: "fd00::/64"}}}, 7, []string{`"x[0][1].subnet"`, "family"}},
		{"overlap in a set", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}, {Subnet: "10.1.0.0/16"}}}, 7, []string{`"x[0][1]"`, "overlaps", "x[0][0]"}},
		{"overlap across sets", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}}, {{Subnet: "10.1.0.128/25"}}}, 7, []string{`"x[1][0]"`, "overlaps"}},
		{"same subnet twice", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}}, {{Subnet: "10.1.0.0/24"}}}, 7, []string{"overlaps"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets, err := ParseSets("x", tt.in)
			if tt.code == 0 {
				if err != nil || len(sets) != len(tt.in) {
					t.Fatalf("ParseSets = %v, %v", sets, err)
				}
				return
			}
			checkErr(t, err, tt.code, tt.words...)
		})
	}
}

func TestRangeSetHelpers(t *testing.T) {
	sets, err := ParseSets("x", [][]RangeConfig{{{Subnet: "10.1.0.0/24"}, {Subnet: "10.2.0.0/24", RangeStart: "10.2.0.10", RangeEnd: "10.2.0.20"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := sets[0]
	if got, want := s.String(), "10.1.0.1-10.1.0.254, 10.2.0.10-10.2.0.20"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, tt := range []struct {
		a    string
		want bool
	}{{"10.1.0.1", true}, {"10.1.0.255", false}, {"10.2.0.9", false}, {"10.2.0.20", true}, {"fd00::1", false}} {
		if got := s.Contains(addr(tt.a)); got != tt.want {
			t.Errorf("Contains(%s) = %v", tt.a, got)
		}
	}
	if _, err := ParseSets("x", nil); err != nil {
		t.Errorf("ParseSets(nil): %v", err)
	}
	if types.ErrUnsupportedField != 2 {
		t.Fatal("code 2 moved")
	}
}
