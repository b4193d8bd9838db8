package tap

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
)

// TestExample: examples/47-tap.conflist loads as a conflist and its tap
// plugin passes tap's checks.
func TestExample(t *testing.T) {
	l, err := libcni.ConfListFromFile("../../examples/47-tap.conflist")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "tap" {
		t.Fatalf("examples/47-tap.conflist: plugins %+v, want one tap", l.Plugins)
	}
	a := &cniplug.Args{StdinData: l.Plugins[0].Bytes, Conf: &cniplug.NetConf{}}
	if err := json.Unmarshal(a.StdinData, a.Conf); err != nil {
		t.Fatal(err)
	}
	if c, err := parse(a); err != nil || !c.MultiQueue || c.Owner == nil || *c.Owner != 107 {
		t.Errorf("the example's tap plugin: %+v, %v", c, err)
	}
}
