package bridge

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
)

func parse(t *testing.T, conf string) (*Conf, error) {
	t.Helper()
	a := &cniplug.Args{StdinData: []byte(conf)}
	return parseConf(a, Conf{})
}

func TestParseConf(t *testing.T) {
	good := []struct {
		name, conf string
		check      func(*Conf) bool
	}{
		{"defaults", `{}`, func(c *Conf) bool { return c.Bridge == "cni0" && !c.IsGateway && c.MTU == 0 }},
		{"default gateway implies gateway", `{"isDefaultGateway":true}`, func(c *Conf) bool { return c.IsGateway }},
		{"all fields", `{"bridge":"br-x","isGateway":true,"forceAddress":true,"ipMasq":true,"ipMasqBackend":"nftables","mtu":1450,
			"hairpinMode":true,"promiscMode":true,"vlan":100,"enabledad":true,"macspoofchk":true,"dataDir":"/tmp/x",
			"portIsolation":true,"disableContainerInterface":true}`,
			func(c *Conf) bool {
				return c.Bridge == "br-x" && c.ForceAddress && c.IPMasq && c.MTU == 1450 && c.HairpinMode &&
					c.PromiscMode && c.Vlan == 100 && c.EnableDad && c.MacSpoofChk && c.DataDir == "/tmp/x" &&
					c.PortIsolation && c.DisableContainerInterface
			}},
		{"new fields default off", `{}`, func(c *Conf) bool { return !c.PortIsolation && !c.DisableContainerInterface }},
		{"vlan trunk ids and ranges", `{"vlanTrunk":[{"id":5},{"minID":3,"maxID":6},{"id":40}],"preserveDefaultVlan":true}`,
			func(c *Conf) bool { return slices.Equal(c.vlans, []int{3, 4, 5, 6, 40}) && c.PreserveDefaultVlan }},
		{"iptables backend accepted", `{"ipMasqBackend":"iptables"}`, func(c *Conf) bool { return true }},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, tc.conf)
			if err != nil {
				t.Fatalf("parse %s: %v", tc.conf, err)
			}
			if !tc.check(c) {
				t.Errorf("parse %s = %+v", tc.conf, c)
			}
		})
	}
	bad := []struct {
		name, conf string
		code       uint
		mentions   string
	}{
		{"not json", `{"bridge":`, 6, "bridge config"},
		{"wrong type", `{"mtu":"big"}`, 6, "mtu"},
		{"portIsolation not a bool", `{"portIsolation":"yes"}`, 6, "portIsolation"},
		{"disableContainerInterface not a bool", `{"disableContainerInterface":1}`, 6, "disableContainerInterface"},
		{"hairpinMode not a bool", `{"hairpinMode":"true"}`, 6, "hairpinMode"},
		{"bridge name too long", `{"bridge":"a-very-long-bridge-name"}`, 7, "bridge"},
		{"bridge name with slash", `{"bridge":"br/0"}`, 7, "bridge"},
		{"mtu negative", `{"mtu":-1}`, 7, "mtu"},
		{"mtu too small", `{"mtu":60}`, 7, "mtu"},
		{"mtu too large", `{"mtu":70000}`, 7, "mtu"},
		{"vlan too large", `{"vlan":4095}`, 7, "vlan"},
		{"vlan negative", `{"vlan":-2}`, 7, "vlan"},
		{"vlan trunk entry empty", `{"vlanTrunk":[{}]}`, 7, "vlanTrunk"},
		{"vlan trunk min above max", `{"vlanTrunk":[{"minID":9,"maxID":3}]}`, 7, "vlanTrunk"},
		{"vlan trunk id too large", `{"vlanTrunk":[{"id":4095}]}`, 7, "vlanTrunk"},
		{"unknown masq backend", `{"ipMasqBackend":"ipvs"}`, 2, "ipMasqBackend"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.conf)
			if err == nil {
				t.Fatalf("parse %s: no error", tc.conf)
			}
			if got := cniplug.CodeOf(err); got != tc.code {
				t.Errorf("parse %s: code %d, want %d (%v)", tc.conf, got, tc.code, err)
			}
			if !strings.Contains(err.Error(), tc.mentions) {
				t.Errorf("error %q does not name %q", err, tc.mentions)
			}
		})
	}
}

func TestHostVethName(t *testing.T) {
	a := hostVethName("c1", "eth0")
	if a != hostVethName("c1", "eth0") {
		t.Error("not deterministic")
	}
	if a == hostVethName("c1", "eth1") || a == hostVethName("c2", "eth0") {
		t.Error("different attachments share a name")
	}
	if len(a) > 15 || !isOurVeth(a) {
		t.Errorf("name %q: want <= 15 bytes and recognised as ours", a)
	}
	if isOurVeth("cbx0") || isOurVeth("veth1234") {
		t.Error("foreign names recognised as ours")
	}
}

// TestRoleErrorsThroughAdapter: errors reach the runtime with their codes.
func TestRoleErrorsThroughAdapter(t *testing.T) {
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent/ns",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}
	inv := cniplug.Invocation{Getenv: func(k string) string { return env[k] }, Registry: cniplug.NewRegistry(Role)}
	cases := []struct {
		conf string
		code uint
	}{
		{`{"cniVersion":"1.0.0","name":"n","type":"bridge","mtu":5}`, 7},
		{`{"cniVersion":"9.9.9","name":"n","type":"bridge"}`, 1},
		{`{"cniVersion":"1.0.0","name":"n","type":"bridge"}`, 3}, // netns does not exist
	}
	for _, tc := range cases {
		inv.Stdin = strings.NewReader(tc.conf)
		_, err := cniplug.Invoke(context.Background(), Role, inv)
		if got := cniplug.CodeOf(err); got != tc.code {
			t.Errorf("%s: code %d, want %d (%v)", tc.conf, got, tc.code, err)
		}
	}
}

func TestBridgeMAC(t *testing.T) {
	m := bridgeMAC("cni0")
	if m.String() != bridgeMAC("cni0").String() || m.String() == bridgeMAC("cni1").String() {
		t.Errorf("bridge MAC %s not a stable function of the name", m)
	}
	if m[0]&0x01 != 0 || m[0]&0x02 == 0 {
		t.Errorf("bridge MAC %s: want unicast and locally administered", m)
	}
}
