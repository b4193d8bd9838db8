package dhcp

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
)

// TestLoadConfig: the defaults, request by name and number, skipDefault,
// provide with value and fromArg, and the hostname from K8S_POD_NAME
// unless provide sets it.
func TestLoadConfig(t *testing.T) {
	load := func(ipam, rawArgs, pod string) *config {
		t.Helper()
		stdin := []byte(`{"cniVersion":"1.1.0","name":"n","type":"macvlan","ipam":{"type":"dhcp"` + ipam + `}}`)
		conf := &cniplug.NetConf{}
		if err := json.Unmarshal(stdin, conf); err != nil {
			t.Fatal(err)
		}
		a := &cniplug.Args{StdinData: stdin, Conf: conf, RawArgs: rawArgs}
		a.CNIArgs.K8S_POD_NAME = typesString(pod)
		cfg, err := loadConfig(a)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	c := load("", "", "web-0")
	if c.Socket != proto.DefaultSocket || !slices.Equal(c.Request, defaultRequest) {
		t.Errorf("defaults: %+v", c)
	}
	if !slices.Equal(c.Provide, []proto.Option{{Code: 12, Value: "web-0"}}) {
		t.Errorf("hostname from K8S_POD_NAME: %+v", c.Provide)
	}
	c = load(`,"daemonSocketPath":"/x.sock","priority":7,"request":[{"option":"ntp-servers"},{"option":"249","skipDefault":true}]`, "", "")
	if c.Socket != "/x.sock" || c.Priority != 7 || !slices.Equal(c.Request, []int{42, 249}) || len(c.Provide) != 0 {
		t.Errorf("request with skipDefault: %+v", c)
	}
	c = load(`,"provide":[{"option":"host-name","fromArg":"K8S_POD_UID"},{"option":"vendor-class-identifier","value":"cnibox"}]`, "K8S_POD_UID=u1;IgnoreUnknown=1", "web-0")
	if !slices.Equal(c.Provide, []proto.Option{{Code: 12, Value: "u1"}, {Code: 60, Value: "cnibox"}}) {
		t.Errorf("provide: %+v", c.Provide)
	}
	c = load(`,"provide":[{"option":"host-name","fromArg":"K8S_POD_UID"}]`, "", "web-0")
	if !slices.Equal(c.Provide, []proto.Option{{Code: 12, Value: "web-0"}}) {
		t.Errorf("fromArg not passed: %+v, want the K8S_POD_NAME hostname", c.Provide)
	}
}

func typesString(s string) types.UnmarshallableString { return types.UnmarshallableString(s) }
