package netconf

import (
	"errors"
	"testing"
)

// FuzzParse: flannel's net-conf.json, whatever it holds, parses into a
// consistent config (subnets of the network, min <= max) or fails with an
// error wrapping ErrInvalid; it never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`,
		`{"Network":"10.244.0.0/16","SubnetLen":26,"SubnetMin":"10.244.1.0","SubnetMax":"10.244.9.192","Backend":{"Type":"vxlan","VNI":4096,"Port":4789,"DirectRouting":true}}`,
		`{"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Network":"10.244.0.0/16"}`,
		`{"EnableIPv4":false}`,
		`{"Network":"10.244.0.0/31"}`,
		`{"Network":"0.0.0.0/0","SubnetLen":32}`,
		`{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if c.EnableIPv4 {
			if !c.Network.IsValid() || c.SubnetLen < c.Network.Bits() || !c.Network.Contains(c.SubnetMin) || !c.Network.Contains(c.SubnetMax) || c.SubnetMax.Less(c.SubnetMin) {
				t.Fatalf("inconsistent IPv4 config %+v", c)
			}
		}
		if c.EnableIPv6 {
			if !c.IPv6Network.IsValid() || c.IPv6SubnetLen < c.IPv6Network.Bits() || c.IPv6SubnetMax.Less(c.IPv6SubnetMin) {
				t.Fatalf("inconsistent IPv6 config %+v", c)
			}
		}
	})
}
