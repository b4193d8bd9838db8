package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles"
)

// checkBinDir is a bin dir with a file for every role, as cnibox install
// leaves it.
func checkBinDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range roles.Registry().Names() {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bridgeConf is a bridge conflist with host-local IPAM; fields and rng are
// spliced into the bridge plugin and its one range.
func bridgeConf(version, typ, fields, rng string) string {
	return `{"cniVersion": "` + version + `", "name": "checknet", "plugins": [
	  {"type": "` + typ + `", "bridge": "cbx-check0"` + fields + `,
	   "ipam": {"type": "host-local", "ranges": [[` + rng + `]]}},
	  {"type": "portmap", "capabilities": {"portMappings": true}}]}`
}

// TestCheckMistakes: each mistake a newcomer makes in a conflist is found,
// with the field named, and an error makes the exit code 1; warnings alone
// exit 0, or 2 with --strict.
func TestCheckMistakes(t *testing.T) {
	bin := checkBinDir(t)
	good := `{"subnet": "10.99.1.0/24"}`
	huge := `{"subnet": "10.99.1.0/24"}` + strings.Repeat(",", 0)
	cases := []struct {
		name, conf string
		severity   string // of the finding wanted
		path, says string // in it
	}{
		{"typo", bridgeConf("1.0.0", "bridge", `, "isGatway": true`, good), sevWarning, "plugins[0].isGatway", `did you mean "isGateway"`},
		{"wrong type", bridgeConf("1.0.0", "bridge", `, "isGateway": "yes"`, good), sevError, "plugins[0].isGateway", "true or false"},
		{"range without subnet", bridgeConf("1.0.0", "bridge", "", `{"rangeStart": "10.99.1.10"}`), sevError, "plugins[0]", "subnet"},
		{"bad subnet", bridgeConf("1.0.0", "bridge", "", `{"subnet": "10.99.300.0/24"}`), sevError, "plugins[0]", "10.99.300.0/24"},
		{"rangeStart outside", bridgeConf("1.0.0", "bridge", "", `{"subnet": "10.99.1.0/24", "rangeStart": "10.99.2.10"}`), sevError, "plugins[0]", "rangeStart"},
		{"unknown type", bridgeConf("1.0.0", "bridgee", "", good), sevError, "plugins[0].type", `did you mean "bridge"`},
		{"cniVersion", bridgeConf("2.0.0", "bridge", "", good), sevError, "", "2.0.0"},
		{"ipam typo", bridgeConf("1.0.0", "bridge", "", `{"subnet": "10.99.1.0/24", "rangeStrat": "10.99.1.10"}`), sevWarning, "plugins[0].ipam.ranges[0][0].rangeStrat", `did you mean "rangeStart"`},
		{"libcni's field", bridgeConf("1.0.0", "bridge", `, "dns": "x"`, good), sevError, "plugins[0].dns", "a JSON string cannot be read as an object"},
		{"too large", bridgeConf("1.0.0", "bridge", `, "padding": "`+strings.Repeat("x", 20<<20)+`"`, huge), sevError, "", "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "10-check.conflist")
			if err := os.WriteFile(path, []byte(tc.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			ck := checker{reg: roles.Registry(), binDirs: []string{bin}}
			rep := ck.paths([]string{path})
			var found bool
			for _, f := range rep.Files[0].Findings {
				if f.Severity == tc.severity && strings.HasPrefix(f.Path, tc.path) && strings.Contains(f.Message+f.Value, tc.says) {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s at %q saying %q; findings: %+v", tc.severity, tc.path, tc.says, rep.Files[0].Findings)
			}
			code, _ := runCheckCLI(t, bin, path)
			want := 0
			if rep.Errors > 0 {
				want = 1
			}
			if code != want {
				t.Errorf("exit %d, want %d", code, want)
			}
			if rep.Errors == 0 {
				if code, _ := runCheckCLI(t, bin, "--strict", path); code != 2 {
					t.Errorf("--strict with warnings only: exit %d, want 2", code)
				}
			}
		})
	}
}

// TestCheckDropIns: a conflist's plugins of its drop-in directory
// (NAME/*.conf beside it, as libcni 1.3 loads them for the runtime) are
// checked too, named by their file; a list without "plugins" is whole with
// them; loadOnlyInlinedPlugins leaves them out, as the runtime does.
func TestCheckDropIns(t *testing.T) {
	bin := checkBinDir(t)
	dir := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10-a.conflist", bridgeConf("1.0.0", "bridge", "", `{"subnet": "10.99.1.0/24"}`))
	write("checknet/20-tuning.conf", `{"type": "tuning", "mtu": "x"}`)
	write("checknet/30-bandwidth.conf", `{"type": "bandwidth", "ingresRate": 1000}`)
	ck := checker{reg: roles.Registry(), binDirs: []string{bin}}
	findings := func(file string) []checkFinding {
		return ck.paths([]string{filepath.Join(dir, file)}).Files[0].Findings
	}
	has := func(fs []checkFinding, sev, path, says string) bool {
		for _, f := range fs {
			if f.Severity == sev && f.Path == path && strings.Contains(f.Message, says) {
				return true
			}
		}
		return false
	}
	fs := findings("10-a.conflist")
	if !has(fs, sevError, "plugins[2] (checknet/20-tuning.conf).mtu", "integer") {
		t.Errorf("the drop-in tuning's wrong mtu is not an error at its file: %+v", fs)
	}
	if !has(fs, sevWarning, "plugins[3] (checknet/30-bandwidth.conf).ingresRate", `"ingressRate"`) {
		t.Errorf("the drop-in bandwidth's typo is not a warning at its file: %+v", fs)
	}

	write("11-b.conflist", `{"cniVersion": "1.0.0", "name": "onlydropins"}`)
	write("onlydropins/10-bridge.conf", `{"type": "bridge", "bridge": "cbx-check1", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.2.0/24"}]]}}`)
	if fs := findings("11-b.conflist"); len(fs) != 0 {
		t.Errorf("a list whose plugins are all drop-ins: %+v, want none", fs)
	}

	write("12-c.conflist", `{"cniVersion": "1.0.0", "name": "inlined", "loadOnlyInlinedPlugins": true, "plugins": [{"type": "loopback"}]}`)
	write("inlined/10-bad.conf", `{"type": "tuning", "mtu": "x"}`)
	if fs := findings("12-c.conflist"); len(fs) != 0 {
		t.Errorf("loadOnlyInlinedPlugins: the drop-in was checked: %+v", fs)
	}
}

// TestCheckMissingBinary: a role that is not in the bin dir is an error
// with the install fix; CNI_PATH is the bin dir when --bin-dir is not given.
func TestCheckMissingBinary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "10-check.conflist")
	if err := os.WriteFile(path, []byte(bridgeConf("1.0.0", "bridge", "", `{"subnet": "10.99.1.0/24"}`)), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	t.Setenv("CNI_PATH", empty)
	code, out := runCheckCLI(t, "", "--node", path) // as on a node, whoever runs the test
	if code != 1 || !strings.Contains(out, "cnibox install --dir "+empty) {
		t.Errorf("exit %d, want 1 and the install fix for %s:\n%s", code, empty, out)
	}
	t.Setenv("CNI_PATH", checkBinDir(t))
	if code, out := runCheckCLI(t, "", path); code != 0 {
		t.Errorf("with CNI_PATH holding the roles: exit %d\n%s", code, out)
	}
}

// TestCheckExamples: every example config passes clean, warnings included.
func TestCheckExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/*.conf*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	ck := checker{reg: roles.Registry(), binDirs: []string{checkBinDir(t)}}
	for _, f := range files {
		rep := ck.paths([]string{f})
		for _, x := range rep.Files[0].Findings {
			t.Errorf("%s: %s %s: %s", filepath.Base(f), x.Severity, x.Path, x.Message)
		}
	}
}

// runCheckCLI runs `cnibox check` with args (and --bin-dir bin unless bin
// is "") and returns its exit code and output.
func runCheckCLI(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	app := newApp(Options{Registry: roles.Registry()})
	app.Writer, app.ErrWriter = f, f
	argv := []string{"cnibox", "check"}
	if bin != "" {
		argv = append(argv, "--bin-dir", bin)
	}
	code := 0
	if err := app.Run(append(argv, args...)); err != nil {
		code = 1
		if ec, ok := err.(interface{ ExitCode() int }); ok {
			code = ec.ExitCode()
		}
	}
	b, _ := os.ReadFile(out)
	return code, string(b)
}

// TestCheckRunsEveryParser: every role whose config has fields of its own
// has the parser its ADD runs where check finds it (Known.Parse or a
// cniplug.ConfigParser), and check refuses what those ADDs refuse.
func TestCheckRunsEveryParser(t *testing.T) {
	reg := roles.Registry()
	for _, n := range reg.Names() {
		r, _ := reg.Lookup(n)
		if tree := knownTree(r.Known); tree == nil || len(*tree) == 0 {
			continue // common fields only (loopback, passthru)
		}
		_, verbs := r.Verbs.(cniplug.ConfigParser)
		if !verbs && (r.Known == nil || r.Known.Parse == nil) {
			t.Errorf("role %s: no parser for cnibox check (Known.Parse or a ConfigParser Verbs): check passes what its ADD refuses", n)
		}
	}
	bin := checkBinDir(t)
	for _, tc := range []struct{ name, plugin, path string }{
		{"azure-vnet", `{"type": "azure-vnet", "mode": 5, "ipam": {"type": "azure-vnet-ipam"}}`, "plugins[0].mode"},
		{"multi", `{"type": "multi", "delegates": "x"}`, "plugins[0].delegates"},
		{"multus", `{"type": "multus", "delegates": 5}`, "plugins[0].delegates"},
		{"flannel", `{"type": "flannel", "delegate": "x"}`, "plugins[0].delegate"},
		{"vxlan", `{"type": "vxlan", "delegate": "x"}`, "plugins[0].delegate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "10-check.conflist")
			conf := `{"cniVersion": "1.0.0", "name": "checknet", "plugins": [` + tc.plugin + `]}`
			if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			ck := checker{reg: reg, binDirs: []string{bin}}
			rep := ck.paths([]string{path})
			found := false
			for _, f := range rep.Files[0].Findings {
				found = found || (f.Severity == sevError && f.Path == tc.path)
			}
			if !found {
				t.Errorf("no error at %s; findings: %+v", tc.path, rep.Files[0].Findings)
			}
		})
	}
}

// TestCheckListFieldsOnce: a field of the list that libcni copies into
// every plugin (cniVersion) is named where it is written, at the list's top
// level, and once, not again for the IPAM role's parser.
func TestCheckListFieldsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "10-check.conflist")
	if err := os.WriteFile(path, []byte(bridgeConf("2.0.0", "bridge", "", `{"subnet": "10.99.1.0/24"}`)), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := checker{reg: roles.Registry(), binDirs: []string{checkBinDir(t)}}
	rep := ck.paths([]string{path})
	if fs := rep.Files[0].Findings; len(fs) != 1 || fs[0].Path != "cniVersion" || !strings.Contains(fs[0].Message, "2.0.0") {
		t.Errorf("want one error at cniVersion naming 2.0.0; findings: %+v", fs)
	}
}
