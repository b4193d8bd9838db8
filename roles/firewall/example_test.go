package firewall

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
)

// TestExample: examples/48-firewall.conflist (podman's shape: bridge,
// portmap, firewall, tuning) loads and its firewall plugin passes the
// checks.
func TestExample(t *testing.T) {
	l, err := libcni.ConfListFromFile("../../examples/48-firewall.conflist")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range l.Plugins {
		types = append(types, p.Network.Type)
	}
	if len(types) != 4 || types[2] != "firewall" {
		t.Fatalf("plugins %v, want bridge, portmap, firewall, tuning", types)
	}
	a := &cniplug.Args{StdinData: l.Plugins[2].Bytes, Conf: &cniplug.NetConf{}}
	if err := json.Unmarshal(a.StdinData, a.Conf); err != nil {
		t.Fatal(err)
	}
	if c, err := parseConf(a); err != nil || c.IptablesAdminChainName != "CNI-ADMIN" || c.IngressPolicy != "open" {
		t.Errorf("the example's firewall plugin: %+v, %v", c, err)
	}
}
