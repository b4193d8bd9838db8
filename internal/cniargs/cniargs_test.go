package cniargs

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestMerge: cni-args reach every plugin's args.cni, a gated key only the
// plugins that declare its capability (read as libcni reads it), and a
// gated key no plugin declares is a *NotEntitledError naming it.
func TestMerge(t *testing.T) {
	list := `{"name":"net","plugins":[{"type":"bridge","capabilities":{"ips":true},"args":{"cni":{"keep":1}}},` +
		`{"type":"portmap","capabilities":{"portMappings":true}},{"type":"tuning","capabilities":{"mac":false}}]}`
	out, err := Merge([]byte(list), map[string]any{"ips": []any{"10.1.0.2/24"}, "PortMappings": []any{}, "sysctl": map[string]any{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Plugins []struct {
			Args struct {
				CNI map[string]any `json:"cni"`
			} `json:"args"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got.Plugins) != 3 {
		t.Fatalf("Merge = %s, %v", out, err)
	}
	for i, want := range []struct{ ips, pm bool }{{true, false}, {false, true}, {false, false}} {
		cni := got.Plugins[i].Args.CNI
		if _, ok := cni["ips"]; ok != want.ips {
			t.Errorf("plugins[%d] has ips: %v, want %v (%s)", i, ok, want.ips, out)
		}
		if _, ok := cni["PortMappings"]; ok != want.pm {
			t.Errorf("plugins[%d] has PortMappings: %v, want %v (%s)", i, ok, want.pm, out)
		}
		if cni["sysctl"] == nil {
			t.Errorf("plugins[%d] lacks sysctl, which every plugin gets", i)
		}
	}
	if got.Plugins[0].Args.CNI["keep"] != 1.0 {
		t.Errorf("the config's own args.cni was lost: %s", out)
	}

	for _, key := range []string{"mac", "MAC", "Mac"} {
		_, err := Merge([]byte(list), map[string]any{key: "02:00:00:00:00:01"})
		var ne *NotEntitledError
		if !errors.As(err, &ne) || ne.Key != key || ne.Capability != "mac" || ne.Network != "net" {
			t.Errorf("cni-args %q on a network whose plugins declare mac false: %v, want a NotEntitledError", key, err)
		}
	}
	// A single plugin's config is wrapped; a capability spelled with a
	// key libcni folds to "capabilities" counts as libcni counts it.
	single := `{"name":"one","type":"static-bridge","Capabilities":{"ips":true}}`
	if _, err := Merge(AsList([]byte(single)), map[string]any{"ips": []any{"10.1.0.3/24"}}); err != nil {
		t.Errorf("ips on a plugin declaring it as Capabilities: %v", err)
	}
	// What cannot take cni-args is an error, never a panic.
	for _, bad := range []string{`{"plugins":[null]}`, `{"plugins":[{"args":7}]}`, `{"plugins":{}}`, `[`, `null`} {
		if _, err := Merge([]byte(bad), map[string]any{"x": 1}); err == nil {
			t.Errorf("Merge(%s) took cni-args", bad)
		}
	}
}
