package lease

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/agent/netconf"
)

// A lease written by flanneld (its etcd value) reads back, and what cnibox
// writes is what flanneld reads.
func TestAttrsFlannelJSON(t *testing.T) {
	flannel := `{"PublicIP":"172.17.8.103","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"ee:8a:1f:f7:96:c7"}}`
	var a Attrs
	if err := json.Unmarshal([]byte(flannel), &a); err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC("ee:8a:1f:f7:96:c7")
	if a.PublicIP != netip.MustParseAddr("172.17.8.103") || a.BackendType != "vxlan" || a.VNI != 1 || a.VTEPMAC.String() != mac.String() || a.PublicIPv6.IsValid() {
		t.Errorf("decoded %+v", a)
	}
	out, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"PublicIP":"172.17.8.103","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"ee:8a:1f:f7:96:c7"}}` {
		t.Errorf("encoded %s", out)
	}

	dual := Attrs{PublicIP: netip.MustParseAddr("10.0.0.1"), PublicIPv6: netip.MustParseAddr("fd00::1"), BackendType: "vxlan",
		VNI: 1, VTEPMAC: mac, VNI6: 1, VTEPMAC6: net.HardwareAddr{2, 0, 0, 0, 0, 6}}
	b, _ := json.Marshal(dual)
	var back Attrs
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.PublicIPv6 != dual.PublicIPv6 || back.VTEPMAC6.String() != dual.VTEPMAC6.String() {
		t.Errorf("dual stack round trip: %s -> %+v", b, back)
	}

	for _, bad := range []string{`{"PublicIP":"x"}`, `{"PublicIP":"1.2.3.4","BackendData":{"VtepMAC":"zz"}}`, `[`} {
		if err := json.Unmarshal([]byte(bad), &a); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func TestSubnetKey(t *testing.T) {
	tests := []struct {
		key      string
		sn4, sn6 string
	}{
		{"10.244.1.0-24", "10.244.1.0/24", ""},
		{"/coreos.com/network/subnets/10.244.1.0-24", "10.244.1.0/24", ""},
		{"10.244.1.0-24&fd00:10:0:1::-64", "10.244.1.0/24", "fd00:10:0:1::/64"},
	}
	for _, tt := range tests {
		sn4, sn6, ok := ParseSubnetKey(tt.key)
		if !ok || sn4.String() != tt.sn4 || (tt.sn6 != "" && sn6.String() != tt.sn6) || (tt.sn6 == "" && sn6.IsValid()) {
			t.Errorf("ParseSubnetKey(%q) = %v, %v, %v", tt.key, sn4, sn6, ok)
		}
		var p6 netip.Prefix
		if tt.sn6 != "" {
			p6 = netip.MustParsePrefix(tt.sn6)
		}
		if k := SubnetKey(netip.MustParsePrefix(tt.sn4), p6); k != tt.key && "/coreos.com/network/subnets/"+k != tt.key {
			t.Errorf("SubnetKey = %q, want %q", k, tt.key)
		}
	}
	for _, bad := range []string{"config", "10.244.1.1-24", "10.244.1.0-33", ""} {
		if _, _, ok := ParseSubnetKey(bad); ok {
			t.Errorf("ParseSubnetKey(%q) ok", bad)
		}
	}
}

func TestPickFree(t *testing.T) {
	cfg, err := netconf.Parse([]byte(`{"Network": "10.9.0.0/24", "SubnetLen": 28, "Backend": {"Type": "vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := Ranges(cfg)
	taken := map[netip.Prefix]bool{}
	for range 15 {
		p, ok := r.PickFree(taken)
		if !ok || taken[p] || !r.Contains(p) {
			t.Fatalf("PickFree = %v, %v (taken %v)", p, ok, taken)
		}
		taken[p] = true
	}
	if p, ok := r.PickFree(taken); ok {
		t.Fatalf("PickFree on a full range = %v", p)
	}
	if r.Contains(netip.MustParsePrefix("10.9.0.0/28")) {
		t.Error("the first subnet (the network address) must not be leased")
	}
	// A huge range is probed instead of listed.
	big, err := netconf.Parse([]byte(`{"Network": "10.0.0.0/8", "SubnetLen": 30, "Backend": {"Type": "vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := Ranges(big)
	if p, ok := rb.PickFree(nil); !ok || !rb.Contains(p) {
		t.Errorf("PickFree in 10.0.0.0/8 = %v, %v", p, ok)
	}
}

// TestPick: the previous subnet when it is free, else a free one, else
// ErrNetworkFull; a family that is off picks nothing.
func TestPick(t *testing.T) {
	cfg, err := netconf.Parse([]byte(`{"Network": "10.9.0.0/24", "SubnetLen": 28, "Backend": {"Type": "vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := Ranges(cfg)
	prev := netip.MustParsePrefix("10.9.0.32/28")
	if p, err := v4.Pick(prev, nil, 0); p != prev || err != nil {
		t.Errorf("Pick(free previous) = %v, %v; want %v", p, err, prev)
	}
	taken := map[netip.Prefix]bool{prev: true}
	if p, err := v4.Pick(prev, taken, 1); err != nil || p == prev || !v4.Contains(p) {
		t.Errorf("Pick(taken previous) = %v, %v; want another subnet", p, err)
	}
	for p := range 16 {
		taken[netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 9, 0, byte(p * 16)}), 28)] = true
	}
	if p, err := v4.Pick(prev, taken, 15); !errors.Is(err, ErrNetworkFull) {
		t.Errorf("Pick on a full range = %v, %v; want ErrNetworkFull", p, err)
	}
	if p, err := v6.Pick(netip.Prefix{}, nil, 0); p.IsValid() || err != nil {
		t.Errorf("Pick with IPv6 off = %v, %v; want nothing", p, err)
	}
}
