package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
)

// execNS is a namespace name of this test process for cnibox exec
// --new-netns; the test removes it if cnibox left it.
func execNS(t *testing.T, name string) string {
	name = "e2e-exec-" + name + "-" + strings.TrimPrefix(filepath.Base(t.TempDir()), "00")
	name = name[:min(len(name), 40)]
	t.Cleanup(func() { _ = netops.DeleteNamedNS(name) })
	return name
}

// failingChain is a conflist whose bridge adds a pod, whose tuning then
// fails (an MTU no device takes) and whose portmap never runs.
func (e *env) failingChain(middle string) string {
	e.t.Helper()
	f := filepath.Join(e.t.TempDir(), "chain.conflist")
	body := `{"cniVersion": "1.0.0", "name": "execfail", "plugins": [
		{"type": "bridge", "bridge": "cbxexec0", "isGateway": true,
		 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.77.0/24"}]]}},
		` + middle + `,
		{"type": "portmap", "capabilities": {"portMappings": true}}]}`
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return f
}

// TestCLIExecArgsFirst: a bad --args, --cap or --netns with --new-netns is
// refused before the namespace is made: nothing is left behind.
func TestCLIExecArgsFirst(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{"10-bridge.conflist": exampleConf(t)})
	other := nstest.NewNS(t, "e2e")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"args", []string{"--args", "garbage"}, `--args "garbage"`},
		{"cap", []string{"--cap", "notjson"}, `--cap "notjson": not a JSON object`},
		{"both", []string{"--netns", other}, "give one of them"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := execNS(t, tt.name)
			args := append([]string{"exec", "add", "--net", "cnibox", "--conf-dir", conf, "--bin-dir", e.binDir,
				"--cache-dir", e.cacheDir, "--new-netns", ns}, tt.args...)
			out, errs, code := e.withT(t).cliRun(args...)
			if code == 0 || !strings.Contains(errs, tt.want) {
				t.Errorf("cnibox %v: exit %d, stderr %q (want %q)\n%s", args, code, errs, tt.want, out)
			}
			if lines := strings.Count(strings.TrimSpace(errs), "\n") + 1; lines != 1 {
				t.Errorf("stderr has %d lines, want one:\n%s", lines, errs)
			}
			if _, err := os.Stat(filepath.Join(netops.NamedNSDir, ns)); !os.IsNotExist(err) {
				t.Errorf("namespace %s made before the arguments were checked (%v)", ns, err)
			}
		})
	}
}

// TestCLIExecAddRollback: when a plugin of the chain fails, DEL runs for
// the plugins that ran, in reverse order (the failed one first), never for
// those after it; the pod's record, address and host veth are gone and so
// is the namespace --new-netns made. A plugin whose DEL fails too (one
// that does not speak the list's cniVersion) does not stop the DEL of the
// others: bridge's DEL runs (libcni's DelNetworkList stops at it, which
// left bridge's address and record at 48e1376).
func TestCLIExecAddRollback(t *testing.T) {
	for _, tt := range []struct {
		name, middle string
		dels         []string // the DEL records, in order
		want         string   // in the error
		delFails     string   // the DEL failure named on stderr ("": DEL ran clean)
	}{
		{"tuning fails", `{"type": "tuning", "mtu": 5}`, []string{"tuning", "bridge"}, "tuning", ""},
		{"plugin missing", `{"type": "nosuchplugin"}`, []string{"bridge"}, "nosuchplugin", ""},
		{"plugin of another cniVersion", `{"type": "oldplugin"}`, []string{"bridge"}, "incompatible CNI versions",
			"DEL after the failed ADD (plugins oldplugin, bridge)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t).withT(t)
			// A plugin that speaks 0.3.x only and refuses every other call
			// as a skel plugin refuses a config of another version.
			old := "#!/bin/sh\ncase \"$CNI_COMMAND\" in\n" +
				"VERSION) echo '{\"cniVersion\":\"0.3.1\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\"]}' ;;\n" +
				"*) echo '{\"cniVersion\":\"0.3.1\",\"code\":1,\"msg\":\"incompatible CNI versions\"}'; exit 1 ;;\nesac\n"
			if err := os.WriteFile(filepath.Join(e.binDir, "oldplugin"), []byte(old), 0o755); err != nil {
				t.Fatal(err)
			}
			conf := e.failingChain(tt.middle)
			ns := execNS(t, "rb")
			out, errs, code := e.cliRun("exec", "add", "--conf", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir,
				"--new-netns", ns, "--container-id", "rollback1")
			if code == 0 || !strings.Contains(errs, tt.want) {
				t.Fatalf("exec add: exit %d, stderr %q (want %q)\n%s", code, errs, tt.want, out)
			}
			want := "DEL ran for " + strings.Join(tt.dels, ", ")
			if tt.delFails != "" {
				want = tt.delFails
			}
			if !strings.Contains(errs, want) {
				t.Errorf("stderr %q lacks %q", errs, want)
			}
			if _, err := os.Stat(filepath.Join(netops.NamedNSDir, ns)); !os.IsNotExist(err) {
				t.Errorf("namespace %s left after the failed ADD (%v)", ns, err)
			}
			var eps []json.RawMessage
			e.cliJSON(&eps, 0, "inspect", "endpoints")
			if len(eps) != 0 {
				t.Errorf("endpoint records left after the failed ADD: %s", eps)
			}
			if v := bridge.HostVethName("rollback1", "eth0"); hasLink(t, v) {
				t.Errorf("host veth %s left after the failed ADD", v)
			}
			var dels []string
			for _, r := range logRecords(t, e.logFile, "rollback1") {
				if r["command"] == "DEL" {
					dels = append(dels, r["role"].(string))
				}
			}
			if strings.Join(dels, ",") != strings.Join(tt.dels, ",") {
				t.Errorf("DEL ran for %v, want %v in that order", dels, tt.dels)
			}
		})
	}
}

// TestCLIExecUnderIPNetnsExec: a namespace made by `cnibox exec add
// --new-netns` under `ip netns exec` (a mount namespace of its own whose
// /run/netns does not propagate back) is warned about; outside it is not.
func TestCLIExecUnderIPNetnsExec(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{"lo.conf": `{"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}`})
	node := filepath.Base(nstest.NewNS(t, "e2e"))
	run := func(ns string, under bool) string {
		args := []string{"exec", "add", "--net", "lo", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--new-netns", ns}
		cmd := exec.Command(cniboxBin(t), args...)
		if under {
			cmd = exec.Command("ip", append([]string{"netns", "exec", node, cniboxBin(t)}, args...)...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		return string(out)
	}
	if out := run(execNS(t, "plain"), false); strings.Contains(out, "warning") {
		t.Errorf("a warning outside ip netns exec:\n%s", out)
	}
	ns := execNS(t, "under")
	out := run(ns, true)
	if !strings.Contains(out, "warning") || !strings.Contains(out, "ip netns exec") {
		t.Errorf("no warning under ip netns exec:\n%s", out)
	}
	// What it warned of: the namespace went with ip netns exec.
	if _, err := netops.Open(filepath.Join(netops.NamedNSDir, ns)); err == nil {
		t.Errorf("the namespace made under ip netns exec outlived it: the warning is wrong")
	}
}

// logRecords are the records of the log file for the container id.
func logRecords(t *testing.T, file, id string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log record %q: %v", line, err)
		}
		if r["container"] == id {
			recs = append(recs, r)
		}
	}
	return recs
}
