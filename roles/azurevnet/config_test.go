package azurevnet

import (
	"context"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/bridge"
)

// TestAzureVnetConfig: azure-vnet takes bridge mode only (code 2 naming the
// supported mode), defaults to bridge azure0 and azv veths, and ignores the
// gateway fields (the gateway lives in the fabric).
func TestAzureVnetConfig(t *testing.T) {
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent/ns",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}
	inv := cniplug.Invocation{Getenv: func(k string) string { return env[k] }, Registry: cniplug.NewRegistry(Role)}
	cases := []struct {
		conf  string
		code  uint
		words []string
	}{
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"transparent"}`, 2, []string{`"mode"`, `"transparent"`, `"mode": "bridge"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"bridge","master":"a/b"}`, 7, []string{"master", `"a/b"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"Bridge"}`, 3, nil}, // accepted; the netns does not exist
	}
	for _, tc := range cases {
		inv.Stdin = strings.NewReader(tc.conf)
		_, err := cniplug.Invoke(context.Background(), Role, inv)
		if got := cniplug.CodeOf(err); got != tc.code {
			t.Errorf("%s: code %d, want %d (%v)", tc.conf, got, tc.code, err)
		}
		for _, w := range tc.words {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v does not mention %s", tc.conf, err, w)
			}
		}
	}

	c, err := bridge.ParseConf(&cniplug.Args{StdinData: []byte(`{"mode":"bridge","isGateway":true,"isDefaultGateway":true}`)}, defaults, hooks)
	if err != nil {
		t.Fatal(err)
	}
	if c.Bridge != "azure0" || c.IsGateway || c.IsDefaultGW {
		t.Errorf("azure-vnet config %+v: want bridge azure0, no gateway", c)
	}
	if v := c.HostVethName("c1", "eth0"); len(v) != 15 || !strings.HasPrefix(v, "azv") || !c.IsHostVeth(v) || c.IsHostVeth(bridge.HostVethName("c1", "eth0")) {
		t.Errorf("host veth %q: want azv + 12 hex digits", v)
	}
}
