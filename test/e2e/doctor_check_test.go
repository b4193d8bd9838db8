package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestDoctorNamesTheTypo: a bridge network with "isGatway": true (the typo
// of the newcomer's first hour, issue 54) attaches, and the pod's gateway is
// on no interface of the node. doctor reports cnibox check's warning for
// the field with the name it meant, and the failing gateway check of the
// pod points at it.
func TestDoctorNamesTheTypo(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{"10-typo.conflist": `{"cniVersion":"1.0.0","name":"typo","plugins":[
		{"type":"bridge","bridge":"typo0","isGatway":true,
		 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.41.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`})
	l := loadList(t, filepath.Join(conf, "10-typo.conflist"))
	p := e.newPod("typo")
	if _, err := e.cni.AddNetworkList(context.Background(), l, p.rt); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	defer e.del(l, p)
	var rs []doctorResult
	out, errs, code := e.cliRun("doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--json")
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("doctor --json: %v\n%s\n%s", err, out, errs)
	}
	warned, pointed := false, false
	for _, r := range rs {
		if r.Check == "config check" && r.Status == "warn" && strings.Contains(r.Detail, `"isGatway"`) && strings.Contains(r.Detail, `did you mean "isGateway"`) {
			warned = true
		}
		if r.Status == "fail" && strings.HasPrefix(r.Subject, "typo/") && strings.Contains(r.Fix, `"isGatway"`) {
			pointed = true
		}
	}
	if !warned {
		t.Errorf("doctor has no config check warning naming \"isGatway\" and \"isGateway\": %+v", rs)
	}
	if !pointed {
		t.Errorf("no failing check of the pod points at the typo: %+v", rs)
	}
	if code == 0 {
		t.Errorf("doctor exit 0 with the pod's gateway missing")
	}
}

// TestDoctorNodeNetns: doctor run in another network namespace than the one
// --node-netns names fails its namespace check (exit 1, the fix names
// nsenter) and the node checks' fixes point at it; in the named one it
// says nothing of namespaces; a --node-netns that is no file is refused
// with the flag's name. (Without the flag doctor compares with PID 1's,
// which this machine may not let it read.)
func TestDoctorNodeNetns(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{"10-ns.conflist": `{"cniVersion":"1.0.0","name":"ns","plugins":[
		{"type":"bridge","bridge":"nsdoc0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.42.0/24"}]]}}]}`})
	other := nstest.NewNS(t, "e2e-node")
	// run runs doctor with --node-netns nodeNS, or, with "", the test's
	// own namespace (cliRun's default: the namespace doctor runs in)
	run := func(nodeNS string) ([]doctorResult, string, int) {
		t.Helper()
		args := []string{"doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--json"}
		if nodeNS != "" {
			args = append(args, "--node-netns", nodeNS)
		}
		out, errs, code := e.cliRun(args...)
		var rs []doctorResult
		if code != 64 {
			if err := json.Unmarshal([]byte(out), &rs); err != nil {
				t.Fatalf("doctor --json: %v\n%s\n%s", err, out, errs)
			}
		}
		return rs, errs, code
	}
	nsChecks := func(rs []doctorResult) (out []doctorResult) {
		for _, r := range rs {
			if r.Check == "namespace" {
				out = append(out, r)
			}
		}
		return out
	}
	rs, _, code := run(other)
	if ns := nsChecks(rs); code != 1 || len(ns) != 1 || ns[0].Status != "fail" || !strings.Contains(ns[0].Fix, "nsenter --target 1 --net") {
		t.Errorf("doctor outside the node's namespace: exit %d, namespace checks %+v, want exit 1 and one failing with the nsenter fix", code, ns)
	}
	rs, _, _ = run("")
	if ns := nsChecks(rs); len(ns) != 0 || len(rs) == 0 {
		t.Errorf("doctor in the node's namespace: namespace checks %+v of %d results, want none", ns, len(rs))
	}
	_, errs, code := run("/nonexistent/ns/net")
	if code != 64 || !strings.Contains(errs, "--node-netns") {
		t.Errorf("--node-netns /nonexistent/ns/net: exit %d, stderr %q, want 64 (usage) naming --node-netns", code, errs)
	}
}
