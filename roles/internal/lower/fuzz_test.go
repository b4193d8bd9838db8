package lower

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzParseConf: any stdin either parses into a config the ADD path can
// use (a known mode, an MTU in range, a unicast MAC of six bytes) or fails
// with code 2, 6 or 7; it never panics.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"n","type":"macvlan","master":"eth1","mode":"vepa","mtu":1400,"mac":"0a:00:00:00:00:01","bcqueuelen":10}`,
		`{"mode":"source","linkInContainer":true,"runtimeConfig":{"mac":"0a:00:00:00:00:04"},"args":{"cni":{"mac":"zz"}}}`,
		`{"master":"0123456789abcdefg","mtu":-1,"mac":"01:00:5e:00:00:01"}`,
		`{"mode":"l3s","bcqueuelen":1e400}`,
	} {
		f.Add([]byte(s))
	}
	specs := []*Spec{&Macvlan, &Ipvlan}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := &cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}}
		_ = json.Unmarshal(stdin, a.Conf)
		for _, s := range specs {
			c, err := s.parseConf(a)
			if err != nil {
				switch code := cniplug.CodeOf(err); code {
				case types.ErrUnsupportedField, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
				default:
					t.Fatalf("%s: code %d: %v", s.Kind, code, err)
				}
				continue
			}
			if !slices.Contains(s.Modes, c.Mode) || c.MTU < 0 || c.MTU > 65535 || c.BCQueueLen < 0 || len(c.Master) > 15 {
				t.Fatalf("%s: accepted %+v", s.Kind, c)
			}
			if c.mac != nil && len(c.mac) != 6 {
				t.Fatalf("%s: MAC %v accepted", s.Kind, c.mac)
			}
		}
	})
}
