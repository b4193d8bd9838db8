package dummy

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
)

// TestExample: examples/45-dummy.conflist loads as a conflist and its dummy
// plugin passes dummy's checks.
func TestExample(t *testing.T) {
	l, err := libcni.ConfListFromFile("../../examples/45-dummy.conflist")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "dummy" {
		t.Fatalf("examples/45-dummy.conflist: plugins %+v, want one dummy", l.Plugins)
	}
	a := &cniplug.Args{StdinData: l.Plugins[0].Bytes, Conf: &cniplug.NetConf{}}
	if err := json.Unmarshal(a.StdinData, a.Conf); err != nil {
		t.Fatal(err)
	}
	if err := need(a); err != nil {
		t.Errorf("the example's dummy plugin: %v", err)
	}
}
