package ptp

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzParseConf: any stdin either parses into a config the ADD path can
// use (an MTU in range, an IPAM plugin) or fails with code 2, 6 or 7; it
// never panics.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"0.3.1","name":"kindnet","type":"ptp","ipMasq":false,"mtu":1500,"ipam":{"type":"host-local"}}`,
		`{"ipMasq":true,"ipMasqBackend":"iptables","dns":{"nameservers":["10.0.0.10"]},"ipam":{"type":"static"}}`,
		`{"ipMasqBackend":"pf","mtu":-1}`,
		`{"mtu":1e400,"ipam":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := &cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}}
		_ = json.Unmarshal(stdin, a.Conf)
		c, err := parseConf(a)
		if err != nil {
			switch code := cniplug.CodeOf(err); code {
			case types.ErrUnsupportedField, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
			default:
				t.Fatalf("code %d: %v", code, err)
			}
			return
		}
		if c.MTU < 0 || c.MTU > 65535 || a.Conf.IPAM.Type == "" {
			t.Fatalf("accepted %+v with ipam %q", c, a.Conf.IPAM.Type)
		}
	})
}
