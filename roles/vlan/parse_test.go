package vlan

import (
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// FuzzParseConf: any stdin either parses into a VLAN ID the kernel takes
// or fails with code 2, 6 or 7; it never panics.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"n","type":"vlan","master":"eth1","vlanId":42,"mtu":1400}`,
		`{"vlanId":0,"linkInContainer":true}`,
		`{"vlanId":4095}`,
		`{"vlanId":-1,"mode":"bridge"}`,
		`{"vlanId":1e400}`,
		`{"master":"eth1"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := parse(&cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}})
		if err != nil {
			roletest.ConfigCode(t, err)
			return
		}
		if c.VlanID < 0 || c.VlanID > netops.MaxVlanID {
			t.Fatalf("accepted VLAN ID %d", c.VlanID)
		}
	})
}

// TestExample: examples/44-vlan.conflist loads as a conflist and its vlan
// plugin passes vlan's checks.
func TestExample(t *testing.T) {
	var n int
	for _, a := range roletest.Example(t, "../../examples/44-vlan.conflist") {
		if a.Conf.Type != "vlan" {
			continue
		}
		n++
		if c, err := parse(a); err != nil || c.VlanID == 0 {
			t.Errorf("the example's vlan plugin: %+v, %v; want a VLAN ID", c, err)
		}
	}
	if n != 1 {
		t.Errorf("examples/44-vlan.conflist has %d vlan plugins, want 1", n)
	}
}
