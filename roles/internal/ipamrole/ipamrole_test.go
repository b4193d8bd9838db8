package ipamrole

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/store"
)

func TestSection(t *testing.T) {
	type sec struct {
		Routes []RouteJSON `json:"routes"`
	}
	for _, tt := range []struct {
		name, stdin string
		code        uint
		words       []string
	}{
		{"ok", `{"ipam":{"routes":[{"dst":"0.0.0.0/0"}]}}`, 0, nil},
		{"missing", `{}`, types.ErrInvalidNetworkConfig, []string{`"ipam"`, "missing: x reads it from"}},
		{"wrong type", `{"ipam":{"routes":{}}}`, types.ErrDecodingFailure, []string{`"ipam.routes"`, "a list"}},
		{"not JSON", `{"ipam":`, types.ErrDecodingFailure, []string{"stdin: not valid JSON"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in, err := Section[sec](&cniplug.Args{StdinData: []byte(tt.stdin)}, "x reads it")
			if tt.code != 0 {
				roletest.CheckErr(t, err, tt.code, tt.words...)
				return
			}
			if err != nil || len(in.Routes) != 1 {
				t.Fatalf("%+v, %v", in, err)
			}
		})
	}
}

func TestParseRoutes(t *testing.T) {
	table := 5
	got, err := ParseRoutes("ipam.routes", []RouteJSON{{Dst: "0.0.0.0/0", GW: "10.1.0.1", Table: &table}, {Dst: " fd00::/8 "}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.1.0.1"), Table: &table}, {Dst: netip.MustParsePrefix("fd00::/8")}}
	if len(got) != 2 || got[0].Dst != want[0].Dst || got[0].GW != want[0].GW || *got[0].Table != 5 || got[1].Dst != want[1].Dst || got[1].GW.IsValid() {
		t.Errorf("got %+v", got)
	}
	for _, tt := range []struct {
		name  string
		in    RouteJSON
		code  uint
		words []string
	}{
		{"no dst", RouteJSON{GW: "10.0.0.1"}, types.ErrInvalidNetworkConfig, []string{`"ipam.routes[0].dst"`, "missing"}},
		{"bad dst", RouteJSON{Dst: "x"}, types.ErrInvalidNetworkConfig, []string{`"ipam.routes[0].dst"`, `"x"`}},
		{"host bits", RouteJSON{Dst: "10.1.0.1/24"}, types.ErrInvalidNetworkConfig, []string{"10.1.0.0/24"}},
		{"mapped", RouteJSON{Dst: "::ffff:10.0.0.0/104"}, types.ErrUnsupportedField, []string{"IPv4-mapped"}},
		{"bad gw", RouteJSON{Dst: "0.0.0.0/0", GW: "gw"}, types.ErrInvalidNetworkConfig, []string{`"ipam.routes[0].gw"`}},
		{"gw family", RouteJSON{Dst: "0.0.0.0/0", GW: "fd00::1"}, types.ErrInvalidNetworkConfig, []string{"family"}},
		{"negative mtu", RouteJSON{Dst: "0.0.0.0/0", MTU: -1}, types.ErrInvalidNetworkConfig, []string{"negative"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRoutes("ipam.routes", []RouteJSON{tt.in})
			roletest.CheckErr(t, err, tt.code, tt.words...)
		})
	}
}

func TestResult(t *testing.T) {
	ips := Allocated([]ipam.Allocation{
		{Addr: netip.MustParsePrefix("10.1.0.5/24"), Gateway: netip.MustParseAddr("10.1.0.1")},
		{Addr: netip.MustParsePrefix("fd00::5/64")},
	})
	routes := []Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.1.0.1"), MTU: 1400}}
	res := Result(ips, routes, types.DNS{Nameservers: []string{"10.1.0.53"}})
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cniVersion":"1.1.0","dns":{"nameservers":["10.1.0.53"]},"ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"},{"address":"fd00::5/64"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1","mtu":1400}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// TestPool: ADD's transaction creates the store, DEL twice and GC release by
// owner and run Released, GC needs the list of attachments to keep, and DEL
// and GC without a store are success.
func TestPool(t *testing.T) {
	dir := t.TempDir()
	args := func(cid, stdin string) *cniplug.Args {
		conf := &cniplug.NetConf{}
		if err := json.Unmarshal([]byte(stdin), conf); err != nil {
			t.Fatal(err)
		}
		return &cniplug.Args{ContainerID: cid, IfName: "eth0", StdinData: []byte(stdin), Conf: conf, Stderr: &bytes.Buffer{},
			Getenv: func(k string) string { return map[string]string{store.EnvDataDir: dir}[k] }}
	}
	var released []string
	p := &Pool{Role: "test", Network: "n", Released: func(_ *store.IPAMTx, freed []store.Reservation) error {
		for _, r := range freed {
			released = append(released, r.ContainerID+" "+r.Addr.String())
		}
		return nil
	}}
	plain := `{"name":"n"}`
	if err := p.Del(args("c1", plain)); err != nil {
		t.Fatalf("DEL without a store: %v", err)
	}
	if err := p.GC(args("", `{"name":"n","cni.dev/valid-attachments":[]}`)); err != nil {
		t.Fatalf("GC without a store: %v", err)
	}
	if err := p.View(args("c1", plain), func(*store.IPAMTx) error { return nil }); err == nil {
		t.Fatal("View without a store: no error")
	}
	sets := []ipam.RangeSet{{{Subnet: netip.MustParsePrefix("10.1.0.0/24")}}}
	if err := ipam.Canonicalize(sets, func(int, int) string { return "ipam.ranges" }); err != nil {
		t.Fatal(err)
	}
	for _, cid := range []string{"c1", "c2"} {
		a := args(cid, plain)
		req, err := p.Request(a)
		if err != nil {
			t.Fatal(err)
		}
		req.Sets = sets
		if err := p.Update(a, func(tx *store.IPAMTx) error { _, err := ipam.Allocate(tx, req); return err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := p.Del(args("c1", plain)); err != nil {
			t.Fatal(err)
		}
	}
	roletest.CheckErr(t, p.GC(args("", plain)), types.ErrInvalidNetworkConfig, `"cni.dev/valid-attachments"`)
	if err := p.GC(args("", `{"name":"n","cni.dev/valid-attachments":[{"containerID":"c2","ifname":"eth0"}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.GC(args("", `{"name":"n","cni.dev/attachments":[]}`)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"c1 10.1.0.2", "c2 10.1.0.3"}; strings.Join(released, ",") != strings.Join(want, ",") {
		t.Errorf("released %v, want %v", released, want)
	}
}
