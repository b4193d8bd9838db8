package netconf

import (
	"errors"
	"math/big"
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want func(t *testing.T, c *Config)
		err  string // substring of the error; "" = valid
	}{
		{
			name: "flannel default",
			in:   `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`,
			want: func(t *testing.T, c *Config) {
				if !c.EnableIPv4 || c.EnableIPv6 || c.SubnetLen != 24 || c.SubnetMin != netip.MustParseAddr("10.244.1.0") ||
					c.SubnetMax != netip.MustParseAddr("10.244.255.0") || c.Backend != (Backend{Type: "vxlan", VNI: 1, Port: 8472}) {
					t.Errorf("got %+v", c)
				}
			},
		},
		{
			name: "all fields, lower case keys",
			in: `{"network": "10.10.0.0/16", "subnetLen": 26, "SubnetMin": "10.10.4.0", "SubnetMax": "10.10.8.192",
				"EnableIPv6": true, "IPv6Network": "fd00:10::/56", "IPv6SubnetLen": 64,
				"Backend": {"Type": "VXLAN", "VNI": 42, "Port": 4789, "MTU": 1400, "DirectRouting": true, "GBP": true}}`,
			want: func(t *testing.T, c *Config) {
				if c.SubnetLen != 26 || c.SubnetMin != netip.MustParseAddr("10.10.4.0") || c.SubnetMax != netip.MustParseAddr("10.10.8.192") {
					t.Errorf("v4 range %+v", c)
				}
				if !c.EnableIPv6 || c.IPv6SubnetLen != 64 || c.IPv6SubnetMin != netip.MustParseAddr("fd00:10:0:1::") || c.IPv6SubnetMax != netip.MustParseAddr("fd00:10:0:ff::") {
					t.Errorf("v6 range %+v", c)
				}
				if c.Backend != (Backend{Type: "vxlan", VNI: 42, Port: 4789, MTU: 1400, DirectRouting: true, GBP: true}) {
					t.Errorf("backend %+v", c.Backend)
				}
			},
		},
		{
			name: "small network is split in four",
			in:   `{"Network": "10.1.2.0/26", "Backend": {"Type": "vxlan", "VNI": 0}}`,
			want: func(t *testing.T, c *Config) {
				if c.SubnetLen != 28 || c.SubnetMin != netip.MustParseAddr("10.1.2.16") || c.Backend.VNI != 0 {
					t.Errorf("got %+v", c)
				}
			},
		},
		{name: "no network", in: `{"Backend": {"Type": "vxlan"}}`, err: `"Network" is missing`},
		{name: "bad network", in: `{"Network": "10.244.0.0", "Backend": {"Type": "vxlan"}}`, err: `Network "10.244.0.0" is not an IPv4 CIDR`},
		{name: "host bits", in: `{"Network": "10.244.1.0/16", "Backend": {"Type": "vxlan"}}`, err: "use 10.244.0.0/16"},
		{name: "udp backend", in: `{"Network": "10.244.0.0/16", "Backend": {"Type": "udp"}}`, err: `Backend.Type "udp" is not supported by cnibox-agent`},
		{name: "ipsec refused", in: `{"Network": "10.244.0.0/16", "Backend": {"Type": "ipsec"}}`, err: "is not supported by cnibox-agent"},
		{name: "tencent-vpc refused", in: `{"Network": "10.244.0.0/16", "Backend": {"Type": "tencent-vpc"}}`, err: "is not supported by cnibox-agent"},
		{name: "unknown backend", in: `{"Network": "10.244.0.0/16", "Backend": {"Type": "gre"}}`, err: "not a flannel backend"},
		{name: "MTU too small for VXLAN", in: `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "MTU": 100}}`, err: "Backend.MTU 100 is out of range: use 118..65535"},
		{
			name: "Learning and EnableNFTables",
			in:   `{"Network": "10.244.0.0/16", "EnableNFTables": true, "Backend": {"Type": "vxlan", "Learning": true, "MTU": 1400}}`,
			want: func(t *testing.T, c *Config) {
				if !c.EnableNFTables || !c.Backend.Learning || c.Backend.MTU != 1400 {
					t.Errorf("got %+v", c)
				}
			},
		},
		{name: "no backend", in: `{"Network": "10.244.0.0/16"}`, err: `"Backend" is missing`},
		{name: "subnet too long", in: `{"Network": "10.244.0.0/16", "SubnetLen": 31, "Backend": {"Type": "vxlan"}}`, err: "SubnetLen 31 is too long"},
		{name: "subnet too short", in: `{"Network": "10.244.0.0/16", "SubnetLen": 17, "Backend": {"Type": "vxlan"}}`, err: "use at least 18"},
		{name: "min outside", in: `{"Network": "10.244.0.0/16", "SubnetMin": "10.245.0.0", "Backend": {"Type": "vxlan"}}`, err: "SubnetMin"},
		{name: "max unaligned", in: `{"Network": "10.244.0.0/16", "SubnetMax": "10.244.9.7", "Backend": {"Type": "vxlan"}}`, err: "use 10.244.9.0"},
		{name: "max below min", in: `{"Network": "10.244.0.0/16", "SubnetMin": "10.244.9.0", "SubnetMax": "10.244.3.0", "Backend": {"Type": "vxlan"}}`, err: "below"},
		{name: "vni", in: `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 16777216}}`, err: "Backend.VNI"},
		{name: "mtu", in: `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "MTU": 20}}`, err: "Backend.MTU"},
		{name: "v6 without network", in: `{"Network": "10.244.0.0/16", "EnableIPv6": true, "Backend": {"Type": "vxlan"}}`, err: `"IPv6Network" is missing`},
		{name: "no family", in: `{"EnableIPv4": false, "Backend": {"Type": "vxlan"}}`, err: "enable at least one family"},
		{name: "not json", in: `{"Network": `, err: "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse = %v; want an ErrInvalid containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.want(t, c)
		})
	}
}

func TestSubnets(t *testing.T) {
	min, max := netip.MustParseAddr("10.244.1.0"), netip.MustParseAddr("10.244.255.0")
	if n := Subnets(min, max, 24); n.Int64() != 255 {
		t.Errorf("Subnets = %v, want 255", n)
	}
	if p := NthSubnet(min, 24, big.NewInt(4)); p != netip.MustParsePrefix("10.244.5.0/24") {
		t.Errorf("NthSubnet(4) = %v", p)
	}
	if p := NthSubnet(netip.MustParseAddr("fd00:10:0:1::"), 64, big.NewInt(2)); p != netip.MustParsePrefix("fd00:10:0:3::/64") {
		t.Errorf("NthSubnet v6 = %v", p)
	}
	if DeviceName(1, false) != "flannel.1" || DeviceName(7, true) != "flannel-v6.7" {
		t.Error("DeviceName")
	}
}
