package cloudipam

import (
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles/internal/roletest"
)

func fixtureXML(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/nmagent-getinterfaceinfov1.xml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func addrs(from, to int) []netip.Addr {
	var out []netip.Addr
	for i := from; i <= to; i++ {
		out = append(out, netip.MustParseAddr(fmt.Sprintf("10.240.0.%d", i)))
	}
	return out
}

func TestParseAzureFixture(t *testing.T) {
	nics, err := parseAzureXML(fixtureXML(t))
	if err != nil {
		t.Fatal(err)
	}
	nics, err = tidy("agent", nics)
	if err != nil {
		t.Fatal(err)
	}
	want := []nicInfo{{
		MAC: "000d3a51c490", Subnet: netip.MustParsePrefix("10.240.0.0/16"),
		Primary: addrs(35, 35), Secondary: addrs(36, 65),
	}}
	if !reflect.DeepEqual(nics, want) {
		t.Errorf("got %+v\nwant %+v", nics, want)
	}
}

// wrap builds an answer around one interface's inner XML.
func wrap(mac, inner string) string {
	return `<Interfaces><Interface MacAddress="` + mac + `" IsPrimary="true">` + inner + `</Interface></Interfaces>`
}

const subnet35 = `<IPSubnet Prefix="10.240.0.0/16"><IPAddress Address="10.240.0.35" IsPrimary="true"/><IPAddress Address="10.240.0.36" IsPrimary="false"/></IPSubnet>`

func TestParseAzureXML(t *testing.T) {
	fixture := string(fixtureXML(t))
	deep := strings.Repeat("<a>", 10000) + strings.Repeat("</a>", 10000)
	laughs := `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">` +
		`<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]><Interfaces><Interface MacAddress="&lol3;"/></Interfaces>`
	tests := []struct {
		name  string
		in    string
		want  []nicInfo // nil with words: an error
		words []string
	}{
		{name: "colons and lower case", in: wrap("00:0d:3a:51:c4:90", subnet35), want: []nicInfo{{MAC: "000d3a51c490", Subnet: netip.MustParsePrefix("10.240.0.0/16"), Primary: addrs(35, 35), Secondary: addrs(36, 36)}}},
		{name: "unknown parts skipped", in: `<?xml version="1.0" encoding="utf-8"?><Interfaces Version="2"><Extra><Deep/></Extra>` +
			`<Interface MacAddress="000D3A51C490" New="x"><IPSubnet Prefix="10.240.0.0/16" Gw="y"><IPAddress Address="10.240.0.36"/><Note>hi</Note></IPSubnet></Interface></Interfaces>`,
			want: []nicInfo{{MAC: "000d3a51c490", Subnet: netip.MustParsePrefix("10.240.0.0/16"), Secondary: addrs(36, 36)}}},
		{name: "NIC without subnet", in: `<Interfaces><Interface MacAddress="000D3A51C491"/></Interfaces>`, want: []nicInfo{}},
		{name: "empty", in: "  \n", words: []string{"empty"}},
		{name: "truncated", in: fixture[:len(fixture)/2], words: []string{"not well-formed", "EOF"}},
		{name: "not XML", in: "Service Unavailable", words: []string{"no <Interfaces>"}},
		{name: "wrong root", in: `<Html><Body/></Html>`, words: []string{"root element is <Html>"}},
		{name: "two roots", in: wrap("000D3A51C490", subnet35) + `<Interfaces/>`, words: []string{"more than one root"}},
		{name: "entity expansion", in: laughs, words: []string{"DTD"}},
		{name: "external entity", in: `<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><Interfaces>&e;</Interfaces>`, words: []string{"DTD"}},
		{name: "undeclared entity", in: `<Interfaces><Interface MacAddress="&e;"/></Interfaces>`, words: []string{"not well-formed"}},
		{name: "deep nesting", in: `<Interfaces>` + deep + `</Interfaces>`, words: []string{"nested deeper than 8"}},
		{name: "duplicate attribute", in: `<Interfaces><Interface MacAddress="000D3A51C490" MacAddress="000D3A51C491"/></Interfaces>`, words: []string{"MacAddress is given twice"}},
		{name: "wrong MAC", in: wrap("ZZ0D3A51C490", subnet35), words: []string{`"ZZ0D3A51C490"`, "not a MAC"}},
		{name: "short MAC", in: wrap("000D3A51C4", subnet35), words: []string{"not a MAC"}},
		{name: "missing MAC", in: `<Interfaces><Interface/></Interfaces>`, words: []string{"not a MAC"}},
		{name: "duplicate NIC", in: `<Interfaces><Interface MacAddress="000D3A51C490"/><Interface MacAddress="00:0d:3a:51:c4:90"/></Interfaces>`, words: []string{"listed twice"}},
		{name: "bad prefix", in: wrap("000D3A51C490", `<IPSubnet Prefix="10.240.0.0/33"/>`), words: []string{`"10.240.0.0/33"`, "CIDR"}},
		{name: "host bits", in: wrap("000D3A51C490", `<IPSubnet Prefix="10.240.0.5/16"/>`), words: []string{`"10.240.0.5/16"`}},
		{name: "bad address", in: wrap("000D3A51C490", `<IPSubnet Prefix="10.240.0.0/16"><IPAddress Address="10.240.0.300"/></IPSubnet>`), words: []string{`"10.240.0.300"`, "not an IP address"}},
		{name: "bad IsPrimary", in: wrap("000D3A51C490", `<IPSubnet Prefix="10.240.0.0/16"><IPAddress Address="10.240.0.36" IsPrimary="maybe"/></IPSubnet>`), words: []string{`"maybe"`, "true or false"}},
		{name: "other charset", in: `<?xml version="1.0" encoding="ISO-8859-1"?><Interfaces/>`, words: []string{"ISO-8859-1", "UTF-8"}},
		{name: "too many attributes", in: `<Interfaces><X ` + manyAttrs(20) + `/></Interfaces>`, words: []string{"more than 16 attributes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseAzureXML([]byte(tt.in))
			if tt.words != nil {
				if err == nil {
					t.Fatalf("no error; parsed %+v", got)
				}
				for _, w := range tt.words {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, err = tidy("agent", got); err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 && len(tt.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func manyAttrs(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, ` a%d="x"`, i)
	}
	return b.String()
}

func TestParseAzureManyElements(t *testing.T) {
	in := `<Interfaces>` + strings.Repeat(`<X/>`, xmlMaxElements+1) + `</Interfaces>`
	if _, err := parseAzureXML([]byte(in)); err == nil || !strings.Contains(err.Error(), "more than 65536 elements") {
		t.Errorf("err = %v", err)
	}
}

func TestTidy(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	tests := []struct {
		name  string
		in    []nicInfo
		want  []nicInfo
		words []string
	}{
		{"duplicates count once, primary wins", []nicInfo{
			{MAC: "m1", Subnet: p("10.0.0.0/24"), Primary: []netip.Addr{a("10.0.0.4")}, Secondary: []netip.Addr{a("10.0.0.6"), a("10.0.0.5"), a("10.0.0.6"), a("10.0.0.4")}},
			{MAC: "m1", Subnet: p("10.0.0.0/24"), Secondary: []netip.Addr{a("10.0.0.7")}},
		}, []nicInfo{
			{MAC: "m1", Subnet: p("10.0.0.0/24"), Primary: []netip.Addr{a("10.0.0.4")}, Secondary: []netip.Addr{a("10.0.0.5"), a("10.0.0.6"), a("10.0.0.7")}},
		}, nil},
		{"outside subnet", []nicInfo{{MAC: "m1", Subnet: p("10.0.0.0/24"), Secondary: []netip.Addr{a("10.0.1.5")}}}, nil, []string{"10.0.1.5 is outside its subnet 10.0.0.0/24"}},
		{"one address, two NICs", []nicInfo{
			{MAC: "000d3a51c490", Subnet: p("10.0.0.0/24"), Secondary: []netip.Addr{a("10.0.0.5")}},
			{MAC: "000d3a51c491", Subnet: p("10.0.0.0/24"), Secondary: []netip.Addr{a("10.0.0.5")}},
		}, nil, []string{"10.0.0.5 is listed for NIC 00:0d:3a:51:c4:90", "and for NIC 00:0d:3a:51:c4:91"}},
		{"bad subnet", []nicInfo{{MAC: "m1", Subnet: p("10.0.0.1/24")}}, nil, []string{"not a subnet"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tidy("the agent", tt.in)
			if tt.words != nil {
				roletest.CheckErr(t, err, 6, append([]string{"the agent gave an answer"}, tt.words...)...)
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}

func TestParsePoolFile(t *testing.T) {
	good := `{"interfaces": [
		{"mac": "00:0D:3A:51:C4:90", "subnet": "10.240.0.0/16", "primary": ["10.240.0.35"], "addresses": ["10.240.0.36-10.240.0.38", "10.240.0.50"]},
		{"subnet": "fd00::/64", "addresses": ["fd00::10"]}
	]}`
	got, err := parsePoolFile([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []nicInfo{
		{MAC: "000d3a51c490", Subnet: netip.MustParsePrefix("10.240.0.0/16"), Primary: addrs(35, 35), Secondary: append(addrs(36, 38), addrs(50, 50)...)},
		{Subnet: netip.MustParsePrefix("fd00::/64"), Secondary: []netip.Addr{netip.MustParseAddr("fd00::10")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, tt := range []struct{ name, in, word string }{
		{"not JSON", `<x/>`, "not a pool file"},
		{"truncated", good[:40], "not a pool file"},
		{"unknown field", `{"interfaces": [{"subnet": "10.0.0.0/24", "adresses": ["10.0.0.5"]}]}`, "not a pool file"},
		{"two values", `{} {}`, "more than one"},
		{"bad mac", `{"interfaces": [{"mac": "nope", "subnet": "10.0.0.0/24"}]}`, "interfaces[0].mac is not"},
		{"bad subnet", `{"interfaces": [{"subnet": "10.0.0.0"}]}`, `interfaces[0].subnet`},
		{"bad address", `{"interfaces": [{"subnet": "10.0.0.0/24", "addresses": ["xq"]}]}`, "interfaces[0].addresses[0] is not"},
		{"a shadow file", "root:$6$saltsalt$secrethash:19000:0:99999:7:::\n", "not a pool file"},
		{"backwards range", `{"interfaces": [{"subnet": "10.0.0.0/24", "addresses": ["10.0.0.9-10.0.0.5"]}]}`, "not a range"},
		{"mixed range", `{"interfaces": [{"subnet": "10.0.0.0/24", "addresses": ["10.0.0.9-fd00::1"]}]}`, "not a range"},
		{"huge range", `{"interfaces": [{"subnet": "10.0.0.0/8", "addresses": ["10.0.0.0-10.255.255.255"]}]}`, "more than 262144 addresses"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parsePoolFile([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.word) {
				t.Errorf("err = %v, want %q", err, tt.word)
			}
			// endpoint may name any file: no value of it comes back.
			for _, v := range []string{"adresses", "nope", "xq", "secrethash", "root"} {
				if err != nil && strings.Contains(err.Error(), v) {
					t.Errorf("err = %v: quotes the file's %q", err, v)
				}
			}
		})
	}
}
