package azurevnet

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzParse: any stdin either parses into a mode cnibox does (with, in
// transparent mode, an MTU in range and an IPAM plugin) or fails with code
// 2, 6 or 7; it never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"0.3.0","name":"azure","type":"azure-vnet","mode":"transparent","ipsToRouteViaHost":["169.254.20.10"],"ipam":{"type":"azure-vnet-ipam"}}`,
		`{"mode":"transparent-vlan","bridge":"azure0","multiTenancy":true,"ipam":{"type":"azure-cns"}}`,
		`{"mode":"Bridge","master":"eth0","ipam":{"type":"azure-vnet-ipam"}}`,
		`{"mode":"transparent","mtu":70000,"ipsToRouteViaHost":["::1"]}`,
		`{"mode":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := &cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}}
		_ = json.Unmarshal(stdin, a.Conf)
		ok := func(err error) {
			switch code := cniplug.CodeOf(err); code {
			case types.ErrUnsupportedField, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
			default:
				t.Fatalf("code %d: %v", code, err)
			}
		}
		z, err := fields(a)
		if err != nil {
			ok(err)
			return
		}
		if z.Mode != ModeBridge && z.Mode != ModeTransparent {
			t.Fatalf("accepted mode %q", z.Mode)
		}
		if z.Mode == ModeBridge {
			return
		}
		c, err := parseTransparent(a, z)
		if err != nil {
			ok(err)
			return
		}
		if c.MTU < 0 || c.MTU > 65535 || a.Conf.IPAM.Type == "" || c.IPAM.Type == "azure-cns" {
			t.Fatalf("accepted %+v with ipam %q", c, a.Conf.IPAM.Type)
		}
	})
}
