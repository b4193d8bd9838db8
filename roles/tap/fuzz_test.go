package tap

import (
	"encoding/json"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// FuzzParseConf: any stdin either parses into a config the ADD path can use
// (an MTU in range, IDs below 2^32-1, a bridge name the kernel takes, a
// unicast MAC of six bytes) or fails with code 2, 6 or 7; it never panics.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"n","type":"tap","mtu":1400,"mac":"0a:00:00:00:00:01","multiQueue":true,"owner":1000,"group":0,"bridge":"br0"}`,
		`{"selinuxContext":"system_u:system_r:container_t:s0","runtimeConfig":{"mac":"0a:00:00:00:00:04"},"args":{"cni":{"mac":"zz"}}}`,
		`{"owner":-1,"group":4294967295,"mtu":70000,"bridge":"0123456789abcdefg","mode":"l2"}`,
		`{"owner":1e400,"selinuxContext":"x"}`,
		// found by make fuzz: a multicast MAC from the runtime was taken
		`{"runtimeConfig":{"mac":"01:00:00:00:00:00"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := &cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}}
		_ = json.Unmarshal(stdin, a.Conf)
		c, err := parse(a)
		if err != nil {
			roletest.ConfigCode(t, err)
			return
		}
		if c.MTU < 0 || c.MTU > maxMTU || len(c.Bridge) > 15 {
			t.Fatalf("accepted %+v", c)
		}
		for _, id := range []*uint32{c.Owner, c.Group} {
			if id != nil && *id == 1<<32-1 {
				t.Fatalf("accepted the ID that means none: %+v", c)
			}
		}
		if mac := c.RequestedMAC(); mac != nil && (len(mac) != 6 || mac[0]&1 != 0) {
			t.Fatalf("accepted MAC %v", mac)
		}
	})
}
