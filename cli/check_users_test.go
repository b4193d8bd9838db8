package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles"
)

// runCLI runs the cnibox CLI with the roles' registry and returns its exit
// code and what it printed (stdout and stderr).
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	app := newApp(Options{Registry: roles.Registry()})
	app.Writer, app.ErrWriter = &out, &out
	code := 0
	if err := app.Run(append([]string{"cnibox"}, args...)); err != nil {
		code = 1
		if ec, ok := err.(interface{ ExitCode() int }); ok {
			code = ec.ExitCode()
		}
		out.WriteString(err.Error())
	}
	return code, out.String()
}

// TestInstallConflistChecked: install --conflist refuses a conflist check
// finds an error in, prints the finding and writes nothing (neither the
// binary nor the conflist); a typo is a warning, printed, and installed.
func TestInstallConflistChecked(t *testing.T) {
	bin := writeExe(t, "cnibox")
	for _, tc := range []struct{ name, conf, says string }{
		{"unknown type", bridgeConf("1.0.0", "bridgee", "", `{"subnet": "10.99.1.0/24"}`), `plugins[0].type: "bridgee" is no plugin of cnibox`},
		{"cniVersion", bridgeConf("2.0.0", "bridge", "", `{"subnet": "10.99.1.0/24"}`), "2.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			src := writeConf(t, root, "src.json", tc.conf)
			code, out := runCLI(t, "install", "--dir", filepath.Join(root, "bin"), "--binary", bin,
				"--conflist", src, "--conf-dir", filepath.Join(root, "net.d"), "--conf-name", "10-cnibox.conflist")
			if code != 1 || !strings.Contains(out, "ERROR") || !strings.Contains(out, tc.says) || !strings.Contains(out, "nothing written") {
				t.Errorf("exit %d, want 1 with the finding %q:\n%s", code, tc.says, out)
			}
			for _, p := range []string{"bin", "net.d"} {
				if _, err := os.Stat(filepath.Join(root, p)); !os.IsNotExist(err) {
					t.Errorf("%s written by a refused install (%v)", p, err)
				}
			}
		})
	}
	t.Run("typo", func(t *testing.T) {
		root := t.TempDir()
		src := writeConf(t, root, "src.json", bridgeConf("1.0.0", "bridge", `, "isGatway": true`, `{"subnet": "10.99.1.0/24"}`))
		code, out := runCLI(t, "install", "--dir", filepath.Join(root, "bin"), "--binary", bin,
			"--conflist", src, "--conf-dir", filepath.Join(root, "net.d"), "--conf-name", "10-cnibox.conflist")
		if code != 0 || !strings.Contains(out, `did you mean "isGateway"`) {
			t.Errorf("exit %d, want 0 and the warning:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(root, "net.d", "10-cnibox.conflist")); err != nil {
			t.Errorf("a conflist with warnings only is installed: %v", err)
		}
	})
}

// TestInspectConfigChecks: inspect config shows check's findings of the
// active file: a typo is a warning (still valid, exit 0), a subnet no
// parser takes makes it INVALID (exit 1), where libcni alone said valid.
func TestInspectConfigChecks(t *testing.T) {
	bin := t.TempDir()
	for _, p := range []string{"bridge", "host-local", "portmap"} {
		fakePlugin(t, bin, p, `"0.4.0","1.0.0"`)
	}
	for _, tc := range []struct {
		name, fields, rng string
		code              int
		says              []string
	}{
		{"clean", "", `{"subnet": "10.99.1.0/24"}`, 0, []string{"cnibox check: clean"}},
		{"typo", `, "isGatway": true`, `{"subnet": "10.99.1.0/24"}`, 0, []string{"WARNING  plugins[0].isGatway", `did you mean "isGateway"`, "valid:", "1 warning(s)"}},
		{"bad subnet", "", `{"subnet": "10.99.300.0/24"}`, 1, []string{"ERROR", "10.99.300.0/24", "INVALID: cnibox check found 1 error(s)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := t.TempDir()
			writeConf(t, conf, "10-check.conflist", bridgeConf("1.0.0", "bridge", tc.fields, tc.rng))
			code, out := runCLI(t, "inspect", "config", "--conf-dir", conf, "--bin-dir", bin)
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, s := range tc.says {
				if !strings.Contains(out, s) {
					t.Errorf("no %q in:\n%s", s, out)
				}
			}
		})
	}
}

// TestExecStatusChecks: exec status runs check after the plugins' STATUS:
// a misspelled field leaves the network ready but not clean (exit 0, the
// warning named), an error makes it not ready (exit 1).
func TestExecStatusChecks(t *testing.T) {
	bin := checkBinDir(t)
	for _, tc := range []struct {
		name, fields, rng string
		code              int
		says              []string
	}{
		{"clean", "", `{"subnet": "10.99.1.0/24"}`, 0, []string{`network "checknet" is ready` + "\n"}},
		{"typo", "", `{"subnet": "10.99.1.0/24", "rangeStrat": "10.99.1.10"}`, 0, []string{"plugins[0].ipam.ranges[0][0].rangeStrat", `did you mean "rangeStart"`, `network "checknet" is ready, not clean: 1 warning(s)`}},
		{"bad range", "", `{"rangeStart": "10.99.1.10"}`, 1, []string{"ERROR", `network "checknet" is not ready`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 1.1.0: STATUS is sent (below it, exec status says none was)
			conf := writeConf(t, t.TempDir(), "10-check.conflist", bridgeConf("1.1.0", "bridge", tc.fields, tc.rng))
			code, out := runCLI(t, "exec", "status", "--conf", conf, "--bin-dir", bin)
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, s := range tc.says {
				if !strings.Contains(out, s) {
					t.Errorf("no %q in:\n%s", s, out)
				}
			}
		})
	}
}

// TestInstallSecondaryNetworks: install --secondary-networks (and
// CNIBOX_SECONDARY_NETWORKS=true, the DaemonSet's ConfigMap key) puts the
// conflist in the conf dir wrapped in multi with the pod path on: the list
// as multi's one delegate under its own name and version, the wrapper
// declaring its capabilities; cnibox check finds nothing in the result;
// installed again, it is left alone; a list that is multi already is
// installed as it is.
func TestInstallSecondaryNetworks(t *testing.T) {
	bin := writeExe(t, "cnibox")
	primary := `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	for _, how := range []string{"flag", "env"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			src := writeConf(t, root, "cni-conf.json", primary)
			args := []string{"install", "--dir", filepath.Join(root, "bin"), "--binary", bin,
				"--conflist", src, "--conf-dir", filepath.Join(root, "net.d"), "--conf-name", "10-cnibox.conflist"}
			if how == "flag" {
				args = append(args, "--secondary-networks")
			} else {
				t.Setenv("CNIBOX_SECONDARY_NETWORKS", "true")
			}
			if code, out := runCLI(t, args...); code != 0 {
				t.Fatalf("install: exit %d\n%s", code, out)
			}
			dst := filepath.Join(root, "net.d", "10-cnibox.conflist")
			b, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				CNIVersion, Name string
				Plugins          []struct {
					Type         string
					Kubernetes   bool
					Capabilities map[string]bool
					Delegates    []json.RawMessage
				}
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.Name != "cbr0" || got.CNIVersion != "1.0.0" || len(got.Plugins) != 1 || got.Plugins[0].Type != "multi" ||
				!got.Plugins[0].Kubernetes || !got.Plugins[0].Capabilities["portMappings"] || len(got.Plugins[0].Delegates) != 1 {
				t.Fatalf("installed:\n%s\nwant cbr0 as multi (1.0.0, kubernetes, portMappings) with one delegate", b)
			}
			var del, want any
			json.Unmarshal(got.Plugins[0].Delegates[0], &del)
			json.Unmarshal([]byte(primary), &want)
			if !reflect.DeepEqual(del, want) {
				t.Errorf("the delegate is %s, want the conflist as it was", got.Plugins[0].Delegates[0])
			}
			if code, out := runCLI(t, "check", "--bin-dir", filepath.Join(root, "bin"), dst); code != 0 {
				t.Errorf("cnibox check of the wrapped list: exit %d\n%s", code, out)
			}
			if code, out := runCLI(t, args...); code != 0 || !strings.Contains(out, "ok") {
				t.Errorf("installed again: exit %d, want the conflist left alone:\n%s", code, out)
			}
			// Already multi: as it is.
			_, wrap := roles.Registry().Wrapper()
			if _, err := InstallConflistWrapped(dst, filepath.Join(root, "again"), "x.conflist", wrap); err != nil {
				t.Fatal(err)
			}
			if again, _ := os.ReadFile(filepath.Join(root, "again", "x.conflist")); string(again) != string(b) {
				t.Errorf("a multi list wrapped again:\n%s", again)
			}
		})
	}
}

// TestInstallConflistConfDirOrder: install --conflist into a conf dir where
// another config file sorts first exits 1 naming that file and the fixes,
// with nothing written (containerd and CRI-O would keep using the other
// file); --force installs anyway and warns; a file sorting after it, or the
// conflist's own earlier version, is no obstacle. (At 48e1376: exit 0, and
// the node kept using the other CNI.)
func TestInstallConflistConfDirOrder(t *testing.T) {
	bin := writeExe(t, "cnibox")
	conf := bridgeConf("1.0.0", "bridge", "", `{"subnet": "10.99.1.0/24"}`)
	install := func(root string, extra ...string) (int, string) {
		src := writeConf(t, root, "src.json", conf)
		return runCLI(t, append([]string{"install", "--dir", filepath.Join(root, "bin"), "--binary", bin,
			"--conflist", src, "--conf-dir", filepath.Join(root, "net.d"), "--conf-name", "10-cnibox.conflist"}, extra...)...)
	}
	root := t.TempDir()
	mustDo(t, os.MkdirAll(filepath.Join(root, "net.d"), 0o755))
	writeConf(t, filepath.Join(root, "net.d"), "05-othercni.conflist", `{"cniVersion": "1.0.0", "name": "other", "plugins": [{"type": "othercni"}]}`)
	code, out := install(root)
	if code != 1 || !strings.Contains(out, "05-othercni.conflist") || !strings.Contains(out, `network "other"`) ||
		!strings.Contains(out, "--force") || !strings.Contains(out, "--conf-name 00-cnibox.conflist") || !strings.Contains(out, "nothing written") {
		t.Errorf("exit %d, want 1 naming 05-othercni.conflist and the fixes:\n%s", code, out)
	}
	for _, p := range []string{"bin", "net.d/10-cnibox.conflist"} {
		if _, err := os.Stat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s written by a refused install (%v)", p, err)
		}
	}
	code, out = install(root, "--force")
	if code != 0 || !strings.Contains(out, "warning") || !strings.Contains(out, "05-othercni.conflist") {
		t.Errorf("--force: exit %d, want 0 and a warning naming the other file:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(root, "net.d", "10-cnibox.conflist")); err != nil {
		t.Errorf("--force: not installed: %v", err)
	}

	root = t.TempDir()
	mustDo(t, os.MkdirAll(filepath.Join(root, "net.d"), 0o755))
	writeConf(t, filepath.Join(root, "net.d"), "20-later.conflist", `{"cniVersion": "1.0.0", "name": "later", "plugins": [{"type": "othercni"}]}`)
	if code, out := install(root); code != 0 || strings.Contains(out, "warning") {
		t.Errorf("a file sorting after it: exit %d, want 0 and no warning:\n%s", code, out)
	}
	if code, out := install(root); code != 0 {
		t.Errorf("installed again over its own file: exit %d, want 0:\n%s", code, out)
	}
}
