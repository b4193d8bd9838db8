package azurevnet

import (
	"context"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/bridge"
)

// TestAzureVnetConfig: azure-vnet takes transparent and bridge mode (others
// and azure-cns are code 2 naming what cnibox does), defaults to bridge
// azure0 and azv veths in bridge mode, and ignores the gateway fields there
// (the gateway lives in the fabric).
func TestAzureVnetConfig(t *testing.T) {
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent/ns",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}
	inv := cniplug.Invocation{Getenv: func(k string) string { return env[k] }, Registry: cniplug.NewRegistry(Role)}
	cases := []struct {
		conf  string
		code  uint
		words []string
	}{
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"transparent-vlan","ipam":{"type":"azure-cns"}}`, 2, []string{`"mode"`, `"transparent-vlan"`, `"mode": "transparent"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"tunnel"}`, 2, []string{`"tunnel"`, `"transparent"`, `"bridge"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"transparent","ipam":{"type":"azure-cns"}}`, 2, []string{`"azure-cns"`, `"azure-vnet-ipam"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"transparent","multiTenancy":true,"ipam":{"type":"azure-vnet-ipam"}}`, 2, []string{`"multiTenancy"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"transparent","ipsToRouteViaHost":["169.254.20.10/32"],"ipam":{"type":"azure-vnet-ipam"}}`, 7, []string{`"ipsToRouteViaHost"`, `"169.254.20.10/32"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"transparent"}`, 7, []string{`"ipam"`, "azure-vnet-ipam"}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"transparent","mtu":-1,"ipam":{"type":"azure-vnet-ipam"}}`, 7, []string{`"mtu"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"bridge","master":"a/b"}`, 7, []string{"master", `"a/b"`}},
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"Bridge"}`, 3, nil}, // accepted; the netns does not exist
		{`{"cniVersion":"1.0.0","name":"azure","type":"azure-vnet","mode":"Transparent","ipsToRouteViaHost":["169.254.20.10"],"ipam":{"type":"azure-vnet-ipam"}}`, 3, nil},
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

	c, err := bridgeMode.ParseConf(&cniplug.Args{StdinData: []byte(`{"mode":"bridge","isGateway":true,"isDefaultGateway":true}`)})
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
