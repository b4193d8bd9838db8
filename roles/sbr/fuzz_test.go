package sbr

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzParseConf: any stdin parses or fails with a config or decoding code;
// what parses is a usable table and at most one gateway per family.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"sbr","table":100,"gateways":["10.0.0.1","fd00::1"],"addSourceHints":true}`,
		`{"table":254}`, `{"table":1e400}`, `{"table":-1,"gateways":["x"]}`, `{"gateways":["10.0.0.1,10.0.0.2"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := parseSbrConf(&cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}})
		if err != nil {
			if code := cniplug.CodeOf(err); code != types.ErrDecodingFailure && code != types.ErrInvalidNetworkConfig {
				t.Fatalf("code %d: %v", code, err)
			}
			return
		}
		if c.table < 0 || (c.table >= 253 && c.table <= 255) || (c.gw4.IsValid() && !c.gw4.Is4()) || (c.gw6.IsValid() && !c.gw6.Is6()) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
