package static_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/static"
	"github.com/cnibox/cnibox/store"
)

var registry = cniplug.NewRegistry(static.Role)

// env is one CNI call's environment.
type env map[string]string

// node is a store directory that CNI calls share (static must leave it
// alone).
type node struct {
	t   testing.TB
	dir string
}

func newNode(t testing.TB) *node {
	t.Helper()
	return &node{t: t, dir: t.TempDir()}
}

// call runs one CNI call of role and returns stdout.
func (n *node) call(role *cniplug.Role, cmd, cid, conf string, extra env) ([]byte, error) {
	e := env{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": cid,
		"CNI_NETNS":       "/var/run/netns/" + cid,
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/opt/cni/bin",
		store.EnvDataDir:  n.dir,
	}
	for k, v := range extra {
		e[k] = v
	}
	var stderr bytes.Buffer
	return cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv:   func(k string) string { return e[k] },
		Stdin:    strings.NewReader(conf),
		Stderr:   &stderr,
		Registry: registry,
	})
}

// must runs a call that must succeed.
func (n *node) must(role *cniplug.Role, cmd, cid, conf string, extra env) []byte {
	n.t.Helper()
	out, err := n.call(role, cmd, cid, conf, extra)
	if err != nil {
		n.t.Fatalf("%s %s %s: %v", role.Name, cmd, cid, err)
	}
	return out
}

// conf builds a plugin config around an ipam section.
func conf(version, ipamJSON string, top ...string) string {
	extra := ""
	for _, t := range top {
		extra += "," + t
	}
	return `{"cniVersion":"` + version + `","name":"mynet","type":"bridge","ipam":` + ipamJSON + extra + `}`
}

// result is the part of an ADD result the tests look at, any version.
type result struct {
	CNIVersion string `json:"cniVersion"`
	IPs        []struct {
		Version string `json:"version"`
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	} `json:"ips"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	} `json:"routes"`
	DNS struct {
		Nameservers []string `json:"nameservers"`
	} `json:"dns"`
}

func parseResult(t *testing.T, out []byte) result {
	t.Helper()
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("result %s: %v", out, err)
	}
	return r
}

func checkErr(t *testing.T, err error, code uint, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want code %d", code)
	}
	if got := cniplug.CodeOf(err); got != code {
		t.Errorf("code %d, want %d (%v)", got, code, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q lacks %q", err, w)
		}
	}
}
