package static_test

import (
	"reflect"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/static"
)

func TestStaticConfig(t *testing.T) {
	type ip struct{ addr, gw string }
	tests := []struct {
		name  string
		ipam  string
		top   []string
		args  string
		want  []ip
		code  uint
		words []string
	}{
		{name: "addresses", ipam: `{"type":"static","addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"fd00::1/64"}]}`,
			want: []ip{{"10.10.0.1/24", "10.10.0.254"}, {"fd00::1/64", ""}}},
		{name: "CNI_ARGS IP appends, GATEWAY sets", ipam: `{"addresses":[{"address":"10.10.0.1/24"}]}`, args: "IP=10.20.0.5/16,fd00::5/64;GATEWAY=10.20.0.1,fd00::1",
			want: []ip{{"10.10.0.1/24", ""}, {"10.20.0.5/16", "10.20.0.1"}, {"fd00::5/64", "fd00::1"}}},
		{name: "CNI_ARGS IP alone", ipam: `{}`, args: "IP=10.20.0.5/16", want: []ip{{"10.20.0.5/16", ""}}},
		{name: "args.cni.ips replaces", ipam: `{"addresses":[{"address":"10.10.0.1/24"}]}`, top: []string{`"args":{"cni":{"ips":["10.30.0.5/24"]}}`},
			want: []ip{{"10.30.0.5/24", ""}}},
		{name: "ips capability replaces", ipam: `{"addresses":[{"address":"10.10.0.1/24"}]}`,
			top:  []string{`"args":{"cni":{"ips":["10.30.0.5/24"]}}`, `"runtimeConfig":{"ips":["10.40.0.5/24","fd00::40/64"]}`},
			want: []ip{{"10.40.0.5/24", ""}, {"fd00::40/64", ""}}},
		{name: "a /32 is fine", ipam: `{"addresses":[{"address":"10.10.0.1/32"}]}`, want: []ip{{"10.10.0.1/32", ""}}},

		{name: "no ipam", ipam: `null`, code: 7, words: []string{`"ipam"`}},
		{name: "no address", ipam: `{"addresses":[]}`, code: 7, words: []string{`"ipam.addresses"`, "no address"}},
		{name: "bad address", ipam: `{"addresses":[{"address":"10.10.0.1/33"}]}`, code: 7, words: []string{`"ipam.addresses[0].address"`, `"10.10.0.1/33"`}},
		{name: "address without length", ipam: `{"addresses":[{"address":"10.10.0.1"}]}`, code: 7, words: []string{`"ipam.addresses[0].address"`, "prefix length", "10.10.0.1/24"}},
		{name: "bad gateway", ipam: `{"addresses":[{"address":"10.10.0.1/24","gateway":"x"}]}`, code: 7, words: []string{`"ipam.addresses[0].gateway"`}},
		{name: "gateway family", ipam: `{"addresses":[{"address":"10.10.0.1/24","gateway":"fd00::1"}]}`, code: 7, words: []string{`"ipam.addresses[0].gateway"`, "family"}},
		{name: "bad CNI_ARGS IP", ipam: `{}`, args: "IP=10.1.2.3", code: 7, words: []string{"CNI_ARGS IP", "prefix length"}},
		{name: "bad CNI_ARGS GATEWAY", ipam: `{"addresses":[{"address":"10.10.0.1/24"}]}`, args: "GATEWAY=nope", code: 7, words: []string{"CNI_ARGS GATEWAY", `"nope"`}},
		{name: "bad capability ip", ipam: `{}`, top: []string{`"runtimeConfig":{"ips":["10.40.0.5"]}`}, code: 7, words: []string{`"runtimeConfig.ips[0]"`}},
		{name: "bad route", ipam: `{"addresses":[{"address":"10.10.0.1/24"}],"routes":[{"dst":"x"}]}`, code: 7, words: []string{`"ipam.routes[0].dst"`}},
		{name: "addresses not a list", ipam: `{"addresses":{"address":"10.10.0.1/24"}}`, code: 6, words: []string{`"ipam.addresses"`, "a list"}},
		{name: "dns not an object", ipam: `{"addresses":[{"address":"10.10.0.1/24"}],"dns":[]}`, code: 6, words: []string{`"ipam.dns"`}},
		{name: "mapped address", ipam: `{"addresses":[{"address":"::ffff:10.10.0.1/120"}]}`, code: 2, words: []string{"IPv4-mapped"}},
		{name: "zoned gateway", ipam: `{"addresses":[{"address":"fe80::1/64","gateway":"fe80::2%eth0"}]}`, code: 2, words: []string{"zoned"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			out, err := n.Call(static.Role, "ADD", "c1", conf("1.0.0", tt.ipam, tt.top...), env{"CNI_ARGS": tt.args})
			if tt.code != 0 {
				checkErr(t, err, tt.code, tt.words...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []ip
			for _, x := range parseResult(t, out).IPs {
				got = append(got, ip{x.Address, x.Gateway})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStaticLifecycle(t *testing.T) {
	ipam := `{"type":"static","addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"fd00::1/64"}],
		"routes":[{"dst":"0.0.0.0/0","gw":"10.10.0.254"}],"dns":{"nameservers":["10.10.0.53"],"search":["example.org"]}}`
	for _, v := range cniplug.SupportedVersions {
		t.Run(v, func(t *testing.T) {
			n := newNode(t)
			c := conf(v, ipam)
			out := n.Must(static.Role, "ADD", "c1", c, nil)
			r := parseResult(t, out)
			older := v < "1.0.0"
			if r.CNIVersion != v || len(r.IPs) != 2 || (older && r.IPs[0].Version != "4") || (!older && r.IPs[0].Version != "") {
				t.Errorf("result %s", out)
			}
			if len(r.Routes) != 1 || r.Routes[0].GW != "10.10.0.254" || !reflect.DeepEqual(r.DNS.Nameservers, []string{"10.10.0.53"}) {
				t.Errorf("routes/dns %s", out)
			}
			if v >= "0.4.0" {
				prev := `"prevResult":` + string(out)
				n.Must(static.Role, "CHECK", "c1", conf(v, ipam, prev), nil)
				n.Must(static.Role, "CHECK", "c1", c, nil) // no prevResult: config check only
				other := `{"addresses":[{"address":"10.10.0.9/24"}]}`
				_, err := n.Call(static.Role, "CHECK", "c1", conf(v, other, prev), nil)
				checkErr(t, err, types.ErrUnknownContainer, "10.10.0.9/24", "not in the previous result")
				gw := `{"addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.253"}]}`
				_, err = n.Call(static.Role, "CHECK", "c1", conf(v, gw, prev), nil)
				checkErr(t, err, types.ErrUnknownContainer, "gateway")
			}
			n.Must(static.Role, "DEL", "c1", c, nil)
			n.Must(static.Role, "DEL", "c1", conf(v, `{}`), nil) // nothing to undo, whatever the config
			if v == "1.1.0" {
				n.Must(static.Role, "GC", "", c, nil)
				n.Must(static.Role, "STATUS", "", c, nil)
			}
		})
	}
}
