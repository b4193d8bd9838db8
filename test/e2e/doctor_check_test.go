package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
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
