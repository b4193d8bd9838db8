package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePlugin writes an executable that answers VERSION with versions.
func fakePlugin(t *testing.T, dir, name, versions string) {
	t.Helper()
	script := "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[" + versions + "]}'\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeConf(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestInspectConfig: the first loadable file by name is active, a broken
// earlier one is named in the reason, plugins and IPAM plugins are looked
// up and asked for their versions.
func TestInspectConfig(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	fakePlugin(t, bin, "bridge", `"0.4.0","1.0.0"`)
	fakePlugin(t, bin, "host-local", `"0.4.0","1.0.0"`)
	writeConf(t, conf, "05-broken.conflist", `{"name": `)
	active := writeConf(t, conf, "10-net.conflist", `{"cniVersion":"1.0.0","name":"net","plugins":[
		{"type":"bridge","ipam":{"type":"host-local"},"capabilities":{"portMappings":true}}]}`)
	writeConf(t, conf, "20-single.conf", `{"cniVersion":"1.0.0","name":"single","type":"bridge"}`)
	writeConf(t, conf, "README", `not a config`)

	rep := inspectConfig(context.Background(), conf, bin)
	if rep.Active == nil || rep.Active.File != active || rep.Active.Network != "net" || rep.Active.CNIVersion != "1.0.0" {
		t.Fatalf("active = %+v, want %s", rep.Active, active)
	}
	if !rep.Valid || rep.Error != "" {
		t.Errorf("valid = %v, error %q; want valid", rep.Valid, rep.Error)
	}
	if !strings.Contains(rep.Reason, "05-broken.conflist") || !strings.Contains(rep.Reason, "first loadable of 3") {
		t.Errorf("reason %q does not name the skipped broken file and the count", rep.Reason)
	}
	if len(rep.Files) != 3 || rep.Files[0].Error == "" || rep.Files[2].Network != "single" {
		t.Errorf("files = %+v", rep.Files)
	}
	if len(rep.Capabilities) != 1 || rep.Capabilities[0] != "portMappings" {
		t.Errorf("capabilities = %v", rep.Capabilities)
	}
	if len(rep.Plugins) != 2 || rep.Plugins[0].Type != "bridge" || rep.Plugins[1].Type != "host-local" || rep.Plugins[1].Kind != "ipam" ||
		rep.Plugins[0].Path != filepath.Join(bin, "bridge") || strings.Join(rep.Plugins[0].Versions, ",") != "0.4.0,1.0.0" {
		t.Errorf("plugins = %+v", rep.Plugins)
	}

	t.Run("missing ipam plugin", func(t *testing.T) {
		os.Remove(filepath.Join(bin, "host-local"))
		rep := inspectConfig(context.Background(), conf, bin)
		if rep.Valid || rep.Plugins[1].Error == "" {
			t.Errorf("without host-local: valid %v, plugins %+v", rep.Valid, rep.Plugins)
		}
	})
	t.Run("version not spoken", func(t *testing.T) {
		fakePlugin(t, bin, "bridge", `"0.4.0"`)
		rep := inspectConfig(context.Background(), conf, bin)
		if rep.Valid || !strings.Contains(rep.Error, "does not support config version") || !strings.Contains(rep.Plugins[0].Error, `"1.0.0"`) {
			t.Errorf("bridge without 1.0.0: valid %v, error %q, plugins %+v", rep.Valid, rep.Error, rep.Plugins)
		}
	})
	t.Run("dangling symlink", func(t *testing.T) {
		os.Remove(filepath.Join(bin, "bridge"))
		if err := os.Symlink(filepath.Join(bin, "no-such-cnibox"), filepath.Join(bin, "bridge")); err != nil {
			t.Fatal(err)
		}
		rep := inspectConfig(context.Background(), conf, bin)
		if rep.Valid || !strings.Contains(rep.Plugins[0].Error, "dangling symlink") {
			t.Errorf("dangling bridge link: valid %v, plugins %+v", rep.Valid, rep.Plugins)
		}
	})
	t.Run("empty dir", func(t *testing.T) {
		rep := inspectConfig(context.Background(), t.TempDir(), bin)
		if rep.Valid || rep.Active != nil || rep.Error == "" {
			t.Errorf("empty conf dir: %+v", rep)
		}
	})
}
