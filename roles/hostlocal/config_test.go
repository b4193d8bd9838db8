package hostlocal_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles/hostlocal"
)

func TestHostLocalConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rangeFile := write("range.json", `{"subnet": "10.7.0.0/24", "rangeStart": "10.7.0.50"}`)
	badRangeFile := write("bad.json", `{"subnet": `)
	noSubnetFile := write("nosub.json", `{"rangeStart": "10.7.0.50"}`)
	// rangeFromFile may name any file: its values never come back.
	secretRangeFile := write("vals.json", `{"subnet": "secret-subnet", "gateway": "secret-gw"}`)
	secretTypeFile := write("type.json", `{"subnet": 424242}`)
	resolv := write("resolv.conf", "# comment\n; also\nnameserver 10.96.0.10\nnameserver fd00::10\ndomain cluster.local\nsearch a.svc b.svc\noptions ndots:5 edns0\nbogus\n")

	tests := []struct {
		name  string
		ipam  string
		top   []string // extra top-level fields
		args  string   // CNI_ARGS
		want  []string // addresses on success
		code  uint     // error code, 0 for success
		words []string
		// hidden is text of a file the config names that the message
		// must not quote.
		hidden string
	}{
		// Accepted configs.
		{name: "ranges", ipam: `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}`, want: []string{"10.1.0.2/24"}},
		{name: "legacy subnet", ipam: `{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.100","rangeEnd":"10.1.0.200","gateway":"10.1.0.254"}`, want: []string{"10.1.0.100/24"}},
		{name: "legacy comes before ranges", ipam: `{"subnet":"10.1.0.0/24","ranges":[[{"subnet":"10.2.0.0/24"}]]}`, want: []string{"10.1.0.2/24", "10.2.0.2/24"}},
		{name: "dual stack", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"fd00:1::/64"}]]}`, want: []string{"10.1.0.2/24", "fd00:1::2/64"}},
		{name: "ipRanges replaces ranges", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
			top: []string{`"runtimeConfig":{"ipRanges":[[{"subnet":"10.9.0.0/24","rangeStart":"10.9.0.10"}]]}`}, want: []string{"10.9.0.10/24"}},
		{name: "empty ipRanges keeps ranges", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
			top: []string{`"runtimeConfig":{"ipRanges":[]}`}, want: []string{"10.1.0.2/24"}},
		{name: "rangeFromFile", ipam: `{"rangeFromFile":"` + rangeFile + `"}`, want: []string{"10.7.0.50/24"}},
		{name: "requested by CNI_ARGS", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, args: "IP=10.1.0.77", want: []string{"10.1.0.77/24"}},
		{name: "requested by args.cni.ips", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, top: []string{`"args":{"cni":{"ips":["10.1.0.78"]}}`}, want: []string{"10.1.0.78/24"}},
		{name: "requested by the ips capability", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, top: []string{`"runtimeConfig":{"ips":["10.1.0.79/24"]}`}, want: []string{"10.1.0.79/24"}},
		{name: "unknown ipam fields are ignored", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"whatever":1}`, want: []string{"10.1.0.2/24"}},

		// Decoding errors: 6.
		{name: "ipam not an object", ipam: `[]`, code: 6}, // decoded (and reported) by cniplug
		{name: "ranges not a list", ipam: `{"ranges":"10.1.0.0/24"}`, code: 6, words: []string{`"ipam.ranges"`, "a list"}},
		{name: "subnet not a string", ipam: `{"ranges":[[{"subnet":5}]]}`, code: 6, words: []string{"ipam.ranges.subnet", "a string"}},
		{name: "sticky not a bool", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"sticky":"yes"}`, code: 6, words: []string{`"ipam.sticky"`, "true or false"}},
		{name: "ipRanges not a list", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, top: []string{`"runtimeConfig":{"ipRanges":{"subnet":"x"}}`}, code: 6, words: []string{"runtimeConfig.ipRanges"}},
		{name: "rangeFromFile not JSON", ipam: `{"rangeFromFile":"` + badRangeFile + `"}`, code: 6, words: []string{badRangeFile}},

		// Invalid configs: 7.
		{name: "no ipam", ipam: `null`, code: 7, words: []string{`"ipam"`, "missing"}},
		{name: "no ranges", ipam: `{"type":"host-local"}`, code: 7, words: []string{`"ipam.ranges"`, "missing", `"subnet"`}},
		{name: "empty ranges", ipam: `{"ranges":[]}`, code: 7, words: []string{`"ipam.ranges"`}},
		{name: "empty range set", ipam: `{"ranges":[[]]}`, code: 7, words: []string{`"ipam.ranges[0]"`, "empty"}},
		{name: "legacy start without subnet", ipam: `{"rangeStart":"10.1.0.5"}`, code: 7, words: []string{`"ipam.subnet"`}},
		{name: "legacy bad subnet", ipam: `{"subnet":"10.1.0.0/40"}`, code: 7, words: []string{`"ipam.subnet"`, `"10.1.0.0/40"`}},
		{name: "legacy gateway outside", ipam: `{"subnet":"10.1.0.0/24","gateway":"10.2.0.1"}`, code: 7, words: []string{`"ipam.gateway"`, "10.2.0.1", "outside"}},
		{name: "bad subnet", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"},{"subnet":"banana"}]]}`, code: 7, words: []string{`"ipam.ranges[0][1].subnet"`, `"banana"`}},
		{name: "host bits", ipam: `{"ranges":[[{"subnet":"10.1.0.1/24"}]]}`, code: 7, words: []string{"did you mean 10.1.0.0/24"}},
		{name: "too small", ipam: `{"ranges":[[{"subnet":"10.1.0.0/31"}]]}`, code: 7, words: []string{"too small"}},
		{name: "ipv6 too small", ipam: `{"ranges":[[{"subnet":"fd00::/127"}]]}`, code: 7, words: []string{"too small"}},
		{name: "bad rangeStart", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.300"}]]}`, code: 7, words: []string{`"ipam.ranges[0][0].rangeStart"`, `"10.1.0.300"`}},
		{name: "rangeEnd outside", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24","rangeEnd":"10.1.1.1"}]]}`, code: 7, words: []string{`"ipam.ranges[0][0].rangeEnd"`, "outside"}},
		{name: "start after end", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.50","rangeEnd":"10.1.0.40"}]]}`, code: 7, words: []string{"swap"}},
		{name: "mixed families in a set", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"},{"subnet":"fd00::/64"}]]}`, code: 7, words: []string{`"ipam.ranges[0][1].subnet"`, "family"}},
		{name: "overlap across sets", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.1.0.0/16"}]]}`, code: 7, words: []string{`"ipam.ranges[1][0]"`, "overlaps", "ipam.ranges[0][0]"}},
		{name: "legacy overlaps ranges", ipam: `{"subnet":"10.1.0.0/24","ranges":[[{"subnet":"10.1.0.0/24"}]]}`, code: 7, words: []string{`"ipam.ranges[0][0]"`, "overlaps", "ipam"}},
		{name: "ipRanges bad subnet", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, top: []string{`"runtimeConfig":{"ipRanges":[[{"subnet":"nope"}]]}`}, code: 7, words: []string{`"runtimeConfig.ipRanges[0][0].subnet"`}},
		{name: "rangeFromFile missing", ipam: `{"rangeFromFile":"/nonexistent/range.json"}`, code: 7, words: []string{`"ipam.rangeFromFile"`, "/nonexistent/range.json"}},
		{name: "rangeFromFile bad values", ipam: `{"rangeFromFile":"` + secretRangeFile + `"}`, code: 7, words: []string{`"ipam.rangeFromFile"`, secretRangeFile}, hidden: "secret"},
		{name: "rangeFromFile bad type", ipam: `{"rangeFromFile":"` + secretTypeFile + `"}`, code: 6, words: []string{"subnet", "a string"}, hidden: "424242"},
		{name: "rangeFromFile without subnet", ipam: `{"rangeFromFile":"` + noSubnetFile + `"}`, code: 7, words: []string{`"ipam.rangeFromFile"`, "subnet"}},
		{name: "route without dst", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"routes":[{"gw":"10.1.0.1"}]}`, code: 7, words: []string{`"ipam.routes[0].dst"`, "missing"}},
		{name: "route bad dst", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"routes":[{"dst":"0.0.0.0"}]}`, code: 7, words: []string{`"ipam.routes[0].dst"`, `"0.0.0.0"`}},
		{name: "route dst host bits", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"routes":[{"dst":"10.9.0.1/16"}]}`, code: 7, words: []string{"did you mean 10.9.0.0/16"}},
		{name: "route bad gw", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0","gw":"x"}]}`, code: 7, words: []string{`"ipam.routes[0].gw"`, `"x"`}},
		{name: "route gw family", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0","gw":"fd00::1"}]}`, code: 7, words: []string{`"ipam.routes[0].gw"`, "family"}},
		{name: "route negative mtu", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0","mtu":-1}]}`, code: 7, words: []string{`"ipam.routes[0]"`}},
		{name: "resolvConf missing", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"resolvConf":"/nonexistent/resolv.conf"}`, code: 7, words: []string{`"ipam.resolvConf"`, "/nonexistent/resolv.conf"}},
		{name: "bad requested IP", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, args: "IP=banana", code: 7, words: []string{"CNI_ARGS IP", "banana"}},
		{name: "requested outside", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, args: "IP=10.2.0.5", code: 7, words: []string{"10.2.0.5", "outside every range", "10.1.0.1-10.1.0.254"}},

		// Unsupported values: 2.
		{name: "multicast subnet", ipam: `{"ranges":[[{"subnet":"239.1.0.0/24"}]]}`, code: 2, words: []string{`"ipam.ranges[0][0].subnet"`, "multicast"}},
		{name: "ipv4-mapped subnet", ipam: `{"ranges":[[{"subnet":"::ffff:10.1.0.0/120"}]]}`, code: 2, words: []string{"IPv4-mapped"}},
		{name: "zoned gateway", ipam: `{"ranges":[[{"subnet":"fe80::/64","gateway":"fe80::1%eth0"}]]}`, code: 2, words: []string{`"ipam.ranges[0][0].gateway"`, "zoned"}},
		{name: "ipv4-mapped route", ipam: `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"routes":[{"dst":"::ffff:0.0.0.0/96"}]}`, code: 2, words: []string{`"ipam.routes[0].dst"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			out, err := n.Call(hostlocal.Role, "ADD", "c1", conf("1.0.0", tt.ipam, tt.top...), env{"CNI_ARGS": tt.args})
			if tt.code != 0 {
				checkErr(t, err, tt.code, tt.words...)
				if tt.hidden != "" && strings.Contains(err.Error(), tt.hidden) {
					t.Errorf("ADD = %v: quotes the file's %q", err, tt.hidden)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := parseResult(t, out).Addrs(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("addresses %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("routes and resolvConf in the result", func(t *testing.T) {
		n := newNode(t)
		ipam := `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"resolvConf":"` + resolv + `",
			"routes":[{"dst":"0.0.0.0/0"},{"dst":"10.96.0.0/12","gw":"10.1.0.254"}]}`
		r := parseResult(t, n.Must(hostlocal.Role, "ADD", "c1", conf("1.0.0", ipam), nil))
		if len(r.Routes) != 2 || r.Routes[0].Dst != "0.0.0.0/0" || r.Routes[0].GW != "" || r.Routes[1].Dst != "10.96.0.0/12" || r.Routes[1].GW != "10.1.0.254" {
			t.Errorf("routes %+v", r.Routes)
		}
		d := r.DNS
		if !reflect.DeepEqual(d.Nameservers, []string{"10.96.0.10", "fd00::10"}) || d.Domain != "cluster.local" ||
			!reflect.DeepEqual(d.Search, []string{"a.svc", "b.svc"}) || !reflect.DeepEqual(d.Options, []string{"ndots:5", "edns0"}) {
			t.Errorf("dns %+v", d)
		}
		if r.IPs[0].Gateway != "10.1.0.1" || r.IPs[0].Interface != nil {
			t.Errorf("ip %+v", r.IPs[0])
		}
	})

	t.Run("dataDir", func(t *testing.T) {
		n := newNode(t)
		dd := filepath.Join(t.TempDir(), "data")
		n.Must(hostlocal.Role, "ADD", "c1", conf("1.0.0", `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"dataDir":"`+dd+`"}`), nil)
		if _, err := os.Stat(filepath.Join(dd, "cnibox.db")); err != nil {
			t.Errorf("store not in dataDir: %v", err)
		}
		if _, err := os.Stat(filepath.Join(n.Dir, "cnibox.db")); err == nil {
			t.Error("store written to CNIBOX_DATA_DIR although dataDir is set")
		}
	})
}
