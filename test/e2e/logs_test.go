package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestLogRecords: every call leaves one JSON record with its role, command,
// container and step timings; a failure records its code; `cnibox logs`
// filters by container.
func TestLogRecords(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "10-bridge.conflist"))
	p := e.newPod("logged")
	e.add(l, p)
	e.del(l, p)
	bad := listFromJSON(t, `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"bridge","mtu":5}]}`)
	if _, err := e.cni.AddNetworkList(context.Background(), bad, p.rt); err == nil {
		t.Fatal("ADD with mtu 5 succeeded")
	}
	out, err := exec.Command(cniboxBin(t), "logs", "--file", e.logFile, "--container", p.id, "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("cnibox logs: %v\n%s", err, out)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	var sawAdd, sawDel, sawErr bool
	for _, r := range recs {
		if r["container"] != p.id {
			t.Errorf("record for container %v in a --container %s listing", r["container"], p.id)
		}
		switch {
		case r["role"] == "bridge" && r["command"] == "ADD" && r["msg"] == "ok":
			sawAdd = true
			steps, _ := r["steps"].(map[string]any)
			for _, s := range []string{"ipam", "veth", "addresses", "record"} {
				if _, ok := steps[s]; !ok {
					t.Errorf("ADD record steps %v lack %q", steps, s)
				}
			}
			if r["network"] != "cnibox" || r["pod"] != "default/logged" {
				t.Errorf("ADD record network %v pod %v", r["network"], r["pod"])
			}
		case r["role"] == "bridge" && r["command"] == "DEL":
			sawDel = true
		case r["msg"] == "error":
			sawErr = r["code"] == float64(7) && strings.Contains(r["error"].(string), "mtu")
		}
	}
	if !sawAdd || !sawDel || !sawErr {
		t.Errorf("records: ADD %v DEL %v error(code 7, mtu) %v in\n%s", sawAdd, sawDel, sawErr, out)
	}
	human, err := exec.Command(cniboxBin(t), "logs", "--file", e.logFile, "--errors").CombinedOutput()
	if err != nil || !strings.Contains(string(human), "ERROR 7") || strings.Contains(string(human), " ok") {
		t.Errorf("cnibox logs --errors: %v\n%s", err, human)
	}
}
