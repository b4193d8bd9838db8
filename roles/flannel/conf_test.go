package flannel

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
)

const flannelSeedEnv = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.0.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"

func flannelArgs(conf string, getenv map[string]string) *cniplug.Args {
	a := &cniplug.Args{StdinData: []byte(conf), Getenv: func(k string) string { return getenv[k] }}
	return a
}

func TestFlannelParseEnv(t *testing.T) {
	tests := []struct {
		name, data string
		want       *flannelEnv // nil: an error with code 6 mentioning wantMsg
		wantMsg    string
		hidden     string // text of the file the message must not quote
	}{
		{name: "seed", data: flannelSeedEnv, want: &flannelEnv{
			networks: mustPrefixes("10.244.0.0/16"), subnet4: mustPrefix("10.244.0.0/24"), mtu: 1450, ipMasq: true,
		}},
		{name: "dual stack, comments, quotes", data: "# written by flanneld\n\nFLANNEL_NETWORK=10.244.0.0/16,10.245.0.0/16\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\n" +
			"FLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_SUBNET=\"fd00:10:244:3::1/64\"\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\nFLANNEL_OTHER=x\n",
			want: &flannelEnv{
				networks: mustPrefixes("10.244.0.0/16", "10.245.0.0/16", "fd00:10:244::/56"),
				subnet4:  mustPrefix("10.244.3.0/24"), subnet6: mustPrefix("fd00:10:244:3::/64"), mtu: 1400,
			}},
		{name: "IPv6 only", data: "FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
			want: &flannelEnv{networks: mustPrefixes("fd00::/48"), subnet6: mustPrefix("fd00:0:0:1::/64"), mtu: 1450, ipMasq: true}},
		{name: "not KEY=VALUE", data: "FLANNEL_NETWORK=10.244.0.0/16\ngarbage\n", wantMsg: "line 2: not a KEY=VALUE line", hidden: "garbage"},
		{name: "a shadow file", data: "root:$6$saltsalt$secrethash:19000:0:99999:7:::\n", wantMsg: "line 1: not a KEY=VALUE line", hidden: "secrethash"},
		{name: "bad CIDR", data: "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.0.300/24\n", wantMsg: "line 2: FLANNEL_SUBNET: not a CIDR", hidden: "10.244.0.300"},
		{name: "wrong family", data: "FLANNEL_IPV6_SUBNET=10.244.0.1/24\n", wantMsg: "line 1: FLANNEL_IPV6_SUBNET"},
		{name: "bad MTU", data: "FLANNEL_MTU=big\n", wantMsg: "line 1: FLANNEL_MTU", hidden: "big"},
		{name: "bad ipmasq", data: "FLANNEL_IPMASQ=maybe\n", wantMsg: "line 1: FLANNEL_IPMASQ"},
		{name: "missing keys", data: "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.0.1/24\n", wantMsg: "lacks FLANNEL_MTU, FLANNEL_IPMASQ"},
		{name: "empty", data: "", wantMsg: "lacks FLANNEL_NETWORK or FLANNEL_IPV6_NETWORK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "subnet.env")
			if err := os.WriteFile(path, []byte(tt.data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readFlannelEnv(path)
			if tt.want == nil {
				if err == nil || cniplug.CodeOf(err) != 6 || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("readFlannelEnv = %v (code %d), want code 6 naming %s and %q", err, cniplug.CodeOf(err), path, tt.wantMsg)
				}
				// subnetFile may name any file: its text never comes back.
				if tt.hidden != "" && strings.Contains(err.Error(), tt.hidden) {
					t.Errorf("readFlannelEnv = %v: quotes the file's %q", err, tt.hidden)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.want.path = path
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.env")
		_, err := readFlannelEnv(path)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Errorf("readFlannelEnv(missing) = %v, want fs.ErrNotExist naming the file", err)
		}
	})
}

func TestFlannelDelegateConfig(t *testing.T) {
	seedEnv, err := parseFlannelEnv("subnet.env", []byte(flannelSeedEnv))
	if err != nil {
		t.Fatal(err)
	}
	dualEnv, err := parseFlannelEnv("subnet.env", []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_SUBNET=10.244.3.1/24\n"+
		"FLANNEL_IPV6_SUBNET=fd00:0:0:3::1/64\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, conf string
		env        *flannelEnv
		wantType   string
		want       string // the delegate as JSON
		wantErr    string // a config error (code 7) naming this field
		code       uint   // the code wantErr comes with, when not 7
	}{
		{
			name:     "seed",
			conf:     `{"name":"cbr0","cniVersion":"0.3.1","type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}}`,
			env:      seedEnv,
			wantType: "bridge",
			want: `{"name":"cbr0","cniVersion":"0.3.1","type":"bridge","hairpinMode":true,"isDefaultGateway":true,"ipMasq":false,"mtu":1450,"isGateway":true,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name: "dual stack, ipam and delegate overrides, runtimeConfig",
			conf: `{"name":"n","cniVersion":"1.0.0","type":"flannel","delegate":{"bridge":"cni1","mtu":1300,"ipMasq":true,"isGateway":false},
				"ipam":{"type":"host-local","dataDir":"/x","routes":[{"dst":"192.168.0.0/16"}]},"runtimeConfig":{"portMappings":[]}}`,
			env:      dualEnv,
			wantType: "bridge",
			want: `{"name":"n","cniVersion":"1.0.0","type":"bridge","bridge":"cni1","mtu":1300,"ipMasq":true,"isGateway":false,"runtimeConfig":{"portMappings":[]},
				"ipam":{"type":"host-local","dataDir":"/x","ranges":[[{"subnet":"10.244.3.0/24"}],[{"subnet":"fd00:0:0:3::/64"}]],
				"routes":[{"dst":"192.168.0.0/16"},{"dst":"10.244.0.0/16"},{"dst":"fd00::/56"}]}}`,
		},
		{
			name:     "other delegate type gets no isGateway",
			conf:     `{"name":"n","type":"flannel","delegate":{"type":"ipvlan","master":"eth0"}}`,
			env:      seedEnv,
			wantType: "ipvlan",
			want: `{"name":"n","type":"ipvlan","master":"eth0","ipMasq":false,"mtu":1450,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name:     "no subnet.env (DEL fallback)",
			conf:     `{"name":"cbr0","cniVersion":"0.3.1","type":"flannel","delegate":{"hairpinMode":true}}`,
			wantType: "bridge",
			want:     `{"name":"cbr0","cniVersion":"0.3.1","type":"bridge","hairpinMode":true,"ipMasq":true,"isGateway":true,"ipam":{"type":"host-local"}}`,
		},
		{name: "delegate.name", conf: `{"name":"n","type":"flannel","delegate":{"name":"x"}}`, wantErr: "delegate.name"},
		{name: "delegate.ipam", conf: `{"name":"n","type":"flannel","delegate":{"ipam":{}}}`, wantErr: "delegate.ipam"},
		{name: "delegate.type", conf: `{"name":"n","type":"flannel","delegate":{"type":3}}`, wantErr: "delegate.type"},
		{name: "delegate not an object", conf: `{"name":"n","type":"flannel","delegate":"bridge"}`, wantErr: "delegate", code: 6},
		{name: "ipam.routes", conf: `{"name":"n","type":"flannel","ipam":{"routes":"x"}}`, wantErr: "ipam.routes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlannelConf(flannelArgs(tt.conf, nil))
			if tt.wantErr != "" {
				code := uint(7)
				if tt.code != 0 {
					code = tt.code // a wrong JSON type: cniplug.DecodeConf's 6
				}
				if err == nil || cniplug.CodeOf(err) != code || !strings.Contains(err.Error(), `"`+tt.wantErr+`"`) {
					t.Fatalf("parseFlannelConf = %v, want code %d naming %q", err, code, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			typ, conf, err := c.delegate(tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if typ != tt.wantType {
				t.Errorf("type = %q, want %q", typ, tt.wantType)
			}
			var got, want any
			if err := json.Unmarshal(conf, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("delegate\n got %s\nwant %s", conf, tt.want)
			}
		})
	}
}

func TestFlannelSubnetFilePath(t *testing.T) {
	c := &flannelConf{}
	if got := c.subnetFile(flannelArgs("", nil)); got != FlannelSubnetFile {
		t.Errorf("default = %q, want %q", got, FlannelSubnetFile)
	}
	a := flannelArgs("", map[string]string{EnvFlannelSubnetFile: "/tmp/x.env"})
	if got := c.subnetFile(a); got != "/tmp/x.env" {
		t.Errorf("with $%s = %q", EnvFlannelSubnetFile, got)
	}
	c.SubnetFile = "/etc/y.env"
	if got := c.subnetFile(a); got != "/etc/y.env" {
		t.Errorf("with subnetFile = %q, want the config's", got)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
