package bridge

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzParseConf: any stdin either parses into a config the ADD path can
// use (a valid bridge name, MTU and VLAN in range) or fails with code 2, 6
// or 7; it never panics.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"n","type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`,
		`{"bridge":"br-a","isDefaultGateway":true,"mtu":1400,"vlan":10,"hairpinMode":true,"promiscMode":true,"macspoofchk":true}`,
		`{"bridge":"x","vlanTrunk":[{"id":5}],"ipMasqBackend":"iptables","mtu":-1}`,
		`{"bridge":"0123456789abcdefg"}`,
		`{"mtu":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := parseConf(&cniplug.Args{StdinData: stdin}, Conf{})
		if err != nil {
			switch code := cniplug.CodeOf(err); code {
			case types.ErrUnsupportedField, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
			default:
				t.Fatalf("code %d: %v", code, err)
			}
			return
		}
		if c.Bridge == "" || len(c.Bridge) > 15 {
			t.Fatalf("bridge name %q accepted", c.Bridge)
		}
		if c.MTU < 0 || c.MTU > 65535 || c.Vlan < 0 || c.Vlan > 4094 {
			t.Fatalf("mtu %d / vlan %d accepted", c.MTU, c.Vlan)
		}
		if c.IsDefaultGW && !c.IsGateway {
			t.Fatal("isDefaultGateway without isGateway")
		}
	})
}
