package cniplug

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestErrorfField: a config error's format that names its field gives the
// error that Field; any other format gives none.
func TestErrorfField(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ConfError("mtu", "%d is out of range", 70000), "mtu"},
		{Errorf(types.ErrDecodingFailure, "config field %q: a JSON string cannot be read as an integer", "ipam.ranges[0][0].subnet"), "ipam.ranges[0][0].subnet"},
		{Errorf(types.ErrUnsupportedField, `config field "mode" %q: a vlan device has no mode`, "bridge"), "mode"},
		{Errorf(types.ErrInvalidNetworkConfig, "sysctl allowlist %s line %d is not a regular expression", "/etc/x", 3), ""},
		{Errorf(types.ErrInvalidNetworkConfig, "config field %v", 5), ""},
	} {
		if got := tc.err.(*CodedError).Field; got != tc.want {
			t.Errorf("%v: Field %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestParseForDel: a DEL's parse leaves out each field the role's parser
// refuses (saying so on stderr) until the parser takes the config; the
// verb and what it delegates see the config without them. A refusal that
// names no field, or a field every config has, or an error that is not a
// config error, is the answer as before; ADD and CHECK refuse as before.
func TestParseForDel(t *testing.T) {
	type conf struct {
		MTU  int `json:"mtu"`
		IPAM struct {
			Ranges json.RawMessage `json:"ranges"`
			Type   string          `json:"type"`
		} `json:"ipam"`
		Mode string `json:"mode"`
	}
	parse := func(a *Args) (conf, error) {
		var c conf
		if err := DecodeConf("config", a.StdinData, &c); err != nil {
			return c, err
		}
		switch {
		case c.MTU > 65535:
			return c, ConfError("mtu", "%d is out of range", c.MTU)
		case c.IPAM.Ranges != nil && !json.Valid(c.IPAM.Ranges) || bytes.Contains(c.IPAM.Ranges, []byte("/33")):
			return c, Errorf(types.ErrInvalidNetworkConfig, "config field %q: not a subnet", "ipam.ranges[0][0].subnet")
		case c.Mode == "kernel":
			return c, Errorf(types.ErrIOFailure, "config field %q: the kernel said no", "mode")
		case c.Mode == "nofield":
			return c, Errorf(types.ErrInvalidNetworkConfig, "the mode is wrong")
		case c.Mode == "name":
			return c, ConfError("name", "refused")
		}
		return c, nil
	}
	call := func(cmd, stdin string) (conf, string, string, error) {
		var stderr bytes.Buffer
		a := &Args{Command: cmd, StdinData: []byte(stdin), Stderr: &stderr}
		var err error
		if a.Conf, err = decodeConf(a.StdinData); err != nil {
			t.Fatal(err)
		}
		var got conf
		var seen string
		verb := func(_ context.Context, a *Args, c conf) error {
			got, seen = c, string(a.StdinData)
			if a.Conf.Name != "n" || a.Conf.Type != "bridge" {
				return fmt.Errorf("a.Conf lost the common fields: %+v", a.Conf)
			}
			return nil
		}
		v := &ConfVerbs[conf]{Parse: parse, Check: verb, Del: verb,
			Add: func(ctx context.Context, a *Args, c conf) (types.Result, error) { return nil, verb(ctx, a, c) }}
		_, err = v.Run(context.Background(), a)
		return got, seen, stderr.String(), err
	}
	head := `{"cniVersion":"1.0.0","name":"n","type":"bridge",`

	got, seen, stderr, err := call("DEL", head+`"mtu":70000,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/33"}]],"dataDir":"/d"},"keep":true}`)
	if err != nil {
		t.Fatalf("DEL of a config ADD refuses: %v", err)
	}
	for _, w := range []string{`config field "mtu": 70000 is out of range: DEL goes on without "mtu"`, `DEL goes on without "ipam.ranges"`, "cnibox bridge DEL: network \"n\""} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q lacks %q", stderr, w)
		}
	}
	if got.MTU != 0 || got.IPAM.Type != "host-local" || got.IPAM.Ranges != nil {
		t.Errorf("DEL's config %+v: want no mtu, ipam without ranges", got)
	}
	if strings.Contains(seen, "70000") || strings.Contains(seen, "/33") || !strings.Contains(seen, `"dataDir":"/d"`) || !strings.Contains(seen, `"keep":true`) {
		t.Errorf("the verb's stdin %s: want it without the refused fields, with the others", seen)
	}

	for _, tc := range []struct{ cmd, stdin, want string }{
		{"ADD", head + `"mtu":70000}`, "out of range"},
		{"CHECK", head + `"mtu":70000}`, "out of range"},
		{"DEL", head + `"mode":"nofield"}`, "the mode is wrong"},
		{"DEL", head + `"mode":"kernel"}`, "the kernel said no"},
		{"DEL", head + `"mode":"name"}`, "refused"},
		{"DEL", head + `"mtu":"x"}`, ""},           // a wrong JSON type names its field: left out too
		{"DEL", head + `"MTU":70000}`, ""},         // a key json.Unmarshal takes for the field, case aside
		{"DEL", head + `"mtu":1,"Mtu":70000}`, ""}, // every one of them (the last is read)
	} {
		_, _, stderr, err := call(tc.cmd, tc.stdin)
		if tc.want == "" {
			if err != nil || !strings.Contains(stderr, `without "mtu"`) {
				t.Errorf("%s %s: %v, stderr %q; want it to go on without mtu", tc.cmd, tc.stdin, err, stderr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want the parse's error (%s)", tc.cmd, tc.stdin, err, tc.want)
		}
	}
}
