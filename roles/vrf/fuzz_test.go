package vrf

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzParseConf: any stdin parses or fails with a config or decoding code;
// what parses names an interface and a usable table.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"vrf","vrfname":"blue","table":1001}`,
		`{"vrfname":""}`, `{"vrfname":"a/b","table":255}`, `{"vrfname":"0123456789abcdef"}`, `{"vrfname":"x","table":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := parseVRFConf(&cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}})
		if err != nil {
			if code := cniplug.CodeOf(err); code != types.ErrDecodingFailure && code != types.ErrInvalidNetworkConfig {
				t.Fatalf("code %d: %v", code, err)
			}
			return
		}
		if c.name == "" || len(c.name) > 15 || !validIfName(c.name) || (c.table >= 253 && c.table <= 255) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
