package hostdevice

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
)

// TestExample: examples/46-host-device.conflist loads as a conflist and its
// host-device plugin passes host-device's checks.
func TestExample(t *testing.T) {
	l, err := libcni.ConfListFromFile("../../examples/46-host-device.conflist")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "host-device" {
		t.Fatalf("examples/46-host-device.conflist: plugins %+v, want one host-device", l.Plugins)
	}
	a := &cniplug.Args{StdinData: l.Plugins[0].Bytes, Conf: &cniplug.NetConf{}}
	if err := json.Unmarshal(a.StdinData, a.Conf); err != nil {
		t.Fatal(err)
	}
	if c, err := parse(a); err != nil || c.Device != "eth2" {
		t.Errorf("the example's host-device plugin: %+v, %v", c, err)
	}
}
