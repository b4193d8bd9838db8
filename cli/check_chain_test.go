package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/roles"
)

// checkList checks a conflist of plugins (JSON objects) with cniVersion
// against bin and returns its findings.
func checkList(t *testing.T, bin, version string, plugins ...string) []checkFinding {
	t.Helper()
	path := filepath.Join(t.TempDir(), "10-chain.conflist")
	conf := `{"cniVersion": "` + version + `", "name": "chainnet", "plugins": [` + strings.Join(plugins, ",") + `]}`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := checker{reg: roles.Registry(), binDirs: []string{bin}}
	return ck.paths([]string{path}).Files[0].Findings
}

// findingAt returns the findings of severity sev at path.
func findingAt(fs []checkFinding, sev, path string) []checkFinding {
	var out []checkFinding
	for _, f := range fs {
		if f.Severity == sev && f.Path == path {
			out = append(out, f)
		}
	}
	return out
}

const (
	chainBridge  = `{"type": "bridge", "bridge": "cbx-chain0", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.3.0/24"}]]}}`
	chainPortmap = `{"type": "portmap", "capabilities": {"portMappings": true}}`
)

// TestCheckChainOrder: a chained plugin with no main plugin before it is an
// error (its ADD fails for want of prevResult), with the main plugin to put
// it after; after the main plugin it is fine. (At 48e1376 check said ok.)
func TestCheckChainOrder(t *testing.T) {
	bin := checkBinDir(t)
	fs := checkList(t, bin, "1.0.0", chainPortmap, chainBridge)
	errs := findingAt(fs, sevError, "plugins[0].type")
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "chained plugin") || !strings.Contains(errs[0].Fix, "bridge (plugins[1])") {
		t.Errorf("portmap before bridge: want one error at plugins[0].type whose fix names bridge (plugins[1]); findings %+v", fs)
	}
	fs = checkList(t, bin, "1.0.0", `{"type": "tuning", "mtu": 1400}`, chainPortmap)
	if errs := findingAt(fs, sevError, "plugins[0].type"); len(errs) != 1 || !strings.Contains(errs[0].Fix, "first") {
		t.Errorf("a list of chained plugins only: want an error at plugins[0].type; findings %+v", fs)
	}
	if len(findingAt(fs, sevError, "plugins[1].type")) != 0 {
		// the second's ADD never runs
		t.Errorf("the second chained plugin is named too (only the first fails): %+v", fs)
	}
	if fs := checkList(t, bin, "1.0.0", chainBridge, chainPortmap); len(fs) != 0 {
		t.Errorf("bridge then portmap: %+v, want no finding", fs)
	}
	// A plugin that is not cnibox's may be the main plugin: no finding.
	if err := os.WriteFile(filepath.Join(bin, "othermain"), []byte(versionScript("1.0.0")), 0o755); err != nil {
		t.Fatal(err)
	}
	if fs := checkList(t, bin, "1.0.0", `{"type": "othermain"}`, chainPortmap); len(fs) != 0 {
		t.Errorf("a foreign main plugin then portmap: %+v, want no finding", fs)
	}
}

// TestCheckCapabilities: a chained role without the capability it reads is
// a warning naming the capability to add (portmap without portMappings:
// hostPorts do nothing), unless the config does the work itself
// (bandwidth's own rates); every declared capability is one the role's
// config reads from runtimeConfig.
func TestCheckCapabilities(t *testing.T) {
	bin := checkBinDir(t)
	for _, tc := range []struct{ name, plugin, says string }{
		{"portmap", `{"type": "portmap"}`, `"portMappings": true`},
		{"portmap false", `{"type": "portmap", "capabilities": {"portMappings": false}}`, `"portMappings": true`},
		{"bandwidth", `{"type": "bandwidth"}`, `"bandwidth": true`},
		{"bandwidth, another capability", `{"type": "bandwidth", "capabilities": {"portMappings": true}}`, `"bandwidth": true`},
		{"bandwidth with rates", `{"type": "bandwidth", "ingressRate": 1000000, "ingressBurst": 100000}`, ""},
		{"bandwidth with the capability", `{"type": "bandwidth", "capabilities": {"bandwidth": true}}`, ""},
		{"portmap with the capability", chainPortmap, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := checkList(t, bin, "1.0.0", chainBridge, tc.plugin)
			w := findingAt(fs, sevWarning, "plugins[1].capabilities")
			switch {
			case tc.says == "" && len(fs) != 0:
				t.Errorf("findings %+v, want none", fs)
			case tc.says != "" && (len(w) != 1 || !strings.Contains(w[0].Fix, tc.says) || len(fs) != 1):
				t.Errorf("want one warning at plugins[1].capabilities with the fix %s; findings %+v", tc.says, fs)
			}
		})
	}
	// A declaration names a capability the role's config reads.
	reg := roles.Registry()
	for _, n := range reg.Names() {
		r, _ := reg.Lookup(n)
		if r.Known == nil {
			continue
		}
		for _, c := range r.Known.Capabilities {
			tree := knownTree(r.Known)
			rc := (*tree)["runtimeConfig"]
			if rc == nil {
				t.Errorf("role %s declares capability %q but its config has no runtimeConfig", n, c.Name)
				continue
			}
			if _, ok := (*rc)[c.Name]; !ok {
				t.Errorf("role %s declares capability %q but reads no runtimeConfig.%s", n, c.Name, c.Name)
			}
			for _, f := range c.Unless {
				if _, ok := (*tree)[f]; !ok {
					t.Errorf("role %s: capability %q's Unless field %q is no field of its config", n, c.Name, f)
				}
			}
		}
	}
}

// TestCheckChainedIPAM: an ipam section in a chained plugin is a warning
// (the role ignores it), and what is in it is not judged: the role does
// not read it.
func TestCheckChainedIPAM(t *testing.T) {
	bin := checkBinDir(t)
	fs := checkList(t, bin, "1.0.0", chainBridge,
		`{"type": "portmap", "capabilities": {"portMappings": true}, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.4.0/33"}]]}}`)
	w := findingAt(fs, sevWarning, "plugins[1].ipam")
	if len(w) != 1 || !strings.Contains(w[0].Message, "ignored") || len(fs) != 1 {
		t.Errorf("want one warning at plugins[1].ipam saying it is ignored; findings %+v", fs)
	}
}

// versionScript is a plugin that is not cnibox's, speaking only versions:
// it answers VERSION and refuses everything else as a skel plugin refuses a
// config of another version.
func versionScript(versions ...string) string {
	q := make([]string, len(versions))
	for i, v := range versions {
		q[i] = `"` + v + `"`
	}
	return "#!/bin/sh\ncase \"$CNI_COMMAND\" in\n" +
		"VERSION) echo '{\"cniVersion\":\"" + versions[len(versions)-1] + "\",\"supportedVersions\":[" + strings.Join(q, ",") + "]}' ;;\n" +
		"*) echo '{\"cniVersion\":\"" + versions[len(versions)-1] + "\",\"code\":1,\"msg\":\"incompatible CNI versions\"}'; exit 1 ;;\nesac\n"
}

// TestCheckForeignVersion: a plugin that is not cnibox's and does not speak
// the list's cniVersion is an error (every ADD fails, and the DEL after it
// leaks), from its VERSION answer, as inspect config says INVALID; one
// that speaks it is fine. (At 48e1376 check said ok and exited 0.)
func TestCheckForeignVersion(t *testing.T) {
	bin := checkBinDir(t)
	if err := os.WriteFile(filepath.Join(bin, "oldplugin"), []byte(versionScript("0.3.0", "0.3.1")), 0o755); err != nil {
		t.Fatal(err)
	}
	fs := checkList(t, bin, "1.0.0", chainBridge, `{"type": "oldplugin"}`)
	e := findingAt(fs, sevError, "plugins[1].type")
	if len(e) != 1 || !strings.Contains(e[0].Message, `"1.0.0"`) || !strings.Contains(e[0].Fix, "0.3.0, 0.3.1") {
		t.Errorf("want an error at plugins[1].type naming 1.0.0 and the versions it speaks; findings %+v", fs)
	}
	if fs := checkList(t, bin, "0.3.1", chainBridge, `{"type": "oldplugin"}`); len(fs) != 0 {
		t.Errorf("cniVersion 0.3.1, which it speaks: %+v, want none", fs)
	}

	dir := t.TempDir()
	writeConf(t, dir, "10-old.conflist", `{"cniVersion": "1.0.0", "name": "old", "plugins": [`+chainBridge+`, {"type": "oldplugin"}]}`)
	code, out := runCheckCLI(t, bin, dir)
	if code != 1 || !strings.Contains(out, "oldplugin") {
		t.Errorf("cnibox check: exit %d, want 1 naming oldplugin:\n%s", code, out)
	}
	if code, out := runCLI(t, "inspect", "config", "--conf-dir", dir, "--bin-dir", bin); code != 1 {
		t.Errorf("inspect config: exit %d, want 1 as check:\n%s", code, out)
	}
}

// TestCheckByName: of two files of one network, the one reported as never
// loaded is the one libcni's lookup by name does not return (every
// .conflist before any .conf); the dir's first file, the default network,
// is still said to be loaded by containerd and CRI-O; a file libcni cannot
// load ends its lookup by name, as LoadConfList does. Each case is checked
// against libcni itself. (At 48e1376 the .conflist was called unused.)
func TestCheckByName(t *testing.T) {
	bin := checkBinDir(t)
	ptp := func(name string) string {
		return `{"cniVersion": "1.0.0", "name": "` + name + `", "type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.5.0/24"}]]}}`
	}
	list := func(name, typ string) string {
		return `{"cniVersion": "1.0.0", "name": "` + name + `", "plugins": [{"type": "` + typ + `"}]}`
	}
	for _, tc := range []struct {
		name     string
		files    map[string]string
		network  string
		loaded   string // the file libcni loads by name ("" = the lookup fails)
		warned   string // the file with the warning at "name"
		says     string // in it
		unwarned []string
	}{
		{"conf beside conflist", map[string]string{"10-web.conf": ptp("web"), "10-web.conflist": list("web", "loopback")},
			"web", "10-web.conflist", "10-web.conf", "containerd, CRI-O", []string{"10-web.conflist"}},
		{"conf first, not the default", map[string]string{"05-other.conflist": list("other", "loopback"), "10-web.conf": ptp("web"), "20-web.conflist": list("web", "loopback")},
			"web", "20-web.conflist", "10-web.conf", "never this file", []string{"20-web.conflist"}},
		{"two conflists", map[string]string{"10-a.conflist": list("a", "loopback"), "20-a.conflist": list("a", "ptp")},
			"a", "10-a.conflist", "20-a.conflist", "never this file", []string{"10-a.conflist"}},
		{"a broken conflist first", map[string]string{"05-bad.conflist": `{"cniVersion": "1.0.0", "name": "bad", "plugins": [}`, "10-web.conflist": list("web", "loopback")},
			"web", "", "10-web.conflist", "stops at 05-bad.conflist", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, body := range tc.files {
				writeConf(t, dir, n, body)
			}
			got, err := libcni.LoadConfList(dir, tc.network)
			switch {
			case tc.loaded == "" && err == nil:
				t.Fatalf("libcni loaded network %s: the case is wrong", tc.network)
			case tc.loaded != "":
				if err != nil {
					t.Fatalf("libcni: %v", err)
				}
				want, err := libcni.ConfListFromBytes([]byte(tc.files[tc.loaded])) // each case's pick is a list
				if err != nil {
					t.Fatal(err)
				}
				if got.Plugins[0].Network.Type != want.Plugins[0].Network.Type {
					t.Fatalf("libcni loads a %s plugin, %s has %s: the case is wrong", got.Plugins[0].Network.Type, tc.loaded, want.Plugins[0].Network.Type)
				}
			}
			ck := checker{reg: roles.Registry(), binDirs: []string{bin}}
			files := map[string]checkedFile{}
			for _, f := range ck.dir(dir) {
				files[filepath.Base(f.File)] = f
			}
			w := findingAt(files[tc.warned].Findings, sevWarning, "name")
			if len(w) != 1 || !strings.Contains(w[0].Message, tc.says) {
				t.Errorf("%s: want a warning at name saying %q; findings %+v", tc.warned, tc.says, files[tc.warned].Findings)
			}
			if tc.loaded != "" && (!strings.Contains(w[0].Message, tc.loaded) || files[tc.warned].ShadowedBy != filepath.Join(dir, tc.loaded)) {
				t.Errorf("%s: the warning and shadowedBy must name %s: %+v, shadowedBy %q", tc.warned, tc.loaded, w, files[tc.warned].ShadowedBy)
			}
			for _, n := range tc.unwarned {
				if fs := findingAt(files[n].Findings, sevWarning, "name"); len(fs) != 0 {
					t.Errorf("%s, the file libcni loads by name: %+v, want no warning", n, fs)
				}
			}
		})
	}
}

// TestCheckOffNode: off a node (a bin dir that does not exist, or not
// root) the roles of this binary count as present and the output says so:
// check's own --help example passes; --node checks as on a node. (At
// 48e1376 the example exited 1, every role missing.)
func TestCheckOffNode(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "no-bin-dir")
	t.Setenv("CNI_PATH", nowhere)
	var example []string
	for _, line := range strings.Split(commandByName(t, "check").CustomHelpTemplate, "\n") {
		if args, ok := strings.CutPrefix(line, "Example: cnibox check "); ok && strings.Contains(args, "examples/") {
			example = strings.Fields(strings.ReplaceAll(args, "examples/", "../examples/"))
		}
	}
	if example == nil {
		t.Fatal("no example of examples/ in check --help")
	}
	why := "no bin dir " + nowhere
	if os.Geteuid() != 0 {
		why = "not root"
	}
	code, out := runCheckCLI(t, "", example...)
	var rep checkReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.OffNode != why {
		t.Errorf("cnibox check %s off a node: exit %d, want 0 and offNode %q:\n%s", strings.Join(example, " "), code, why, out)
	}
	path := filepath.Join(t.TempDir(), "10-check.conflist")
	if err := os.WriteFile(path, []byte(bridgeConf("1.0.0", "bridge", "", `{"subnet": "10.99.1.0/24"}`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := runCheckCLI(t, "", path); code != 0 || !strings.Contains(out, "off a node ("+why+")") {
		t.Errorf("off a node: exit %d, want 0 and the output saying why:\n%s", code, out)
	}
	if code, out := runCheckCLI(t, "", "--node", path); code != 1 || !strings.Contains(out, "cnibox install --dir "+nowhere) {
		t.Errorf("--node: exit %d, want 1 and the roles missing:\n%s", code, out)
	}
	if got := nodeHere([]string{checkBinDir(t)}, 1000); got != "not root" {
		t.Errorf("nodeHere as a user = %q, want \"not root\"", got)
	}
	if got := nodeHere([]string{nowhere, checkBinDir(t)}, 0); got != "" {
		t.Errorf("nodeHere as root with a bin dir = %q, want \"\" (a node)", got)
	}
}

// commandByName returns the app's top-level command name.
func commandByName(t *testing.T, name string) *ucli.Command {
	t.Helper()
	for _, c := range newApp(Options{Registry: roles.Registry()}).Commands {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no command %s", name)
	return nil
}
