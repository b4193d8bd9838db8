package multi_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/delegatetest"
	"github.com/cnibox/cnibox/roles/multi"
)

// muK8sConf is a two-network multi config with the pod path switched on by
// extra fields.
func muK8sConf(t *testing.T, extra map[string]any) string {
	t.Helper()
	var m map[string]any
	json.Unmarshal([]byte(muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")))), &m)
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestMultiK8sAgentUnreachable: with the pod path on and a pod in CNI_ARGS,
// an agent that does not answer is error 11 naming the socket, and nothing
// is set up; without pod arguments the configured delegates run as before.
func TestMultiK8sAgentUnreachable(t *testing.T) {
	n := delegatetest.NewNode(t)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	conf := muK8sConf(t, map[string]any{"agentSocket": sock})
	p := n.NewPod("k")
	_, _, err := n.Call(multi.Role, "ADD", p, conf)
	if err == nil || cniplug.CodeOf(err) != 11 || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "--pod-api") {
		t.Fatalf("ADD with no agent = %v (code %d); want 11 naming %s and how to start the agent", err, cniplug.CodeOf(err), sock)
	}
	if recs := n.Records("multinet"); len(recs) != 0 {
		t.Errorf("records after the refused ADD: %+v", recs)
	}
	if hasLink(t, p.Netns, "eth0") {
		t.Errorf("eth0 exists after the refused ADD")
	}

	// No pod in CNI_ARGS (podman without a pod, a plain runtime): the
	// static delegates only, no agent needed; DEL never needs it either.
	n.Env["CNI_ARGS"] = ""
	n.Add(multi.Role, p, conf)
	if !hasLink(t, p.Netns, "eth0") {
		t.Errorf("no eth0 after ADD without pod arguments")
	}
	n.Must(multi.Role, "DEL", p, conf)
	n.Must(multi.Role, "DEL", p, conf)
	if hasLink(t, p.Netns, "eth0") {
		t.Errorf("eth0 still there after DEL")
	}
}

func TestMultiK8sConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		extra map[string]any
		field string
		code  uint
	}{
		{"relative socket", map[string]any{"agentSocket": "agent.sock"}, `"agentSocket"`, 7},
		{"relative confDir", map[string]any{"kubernetes": true, "confDir": "net.d"}, `"confDir"`, 7},
		{"kubernetes not a bool", map[string]any{"kubernetes": "yes"}, `"kubernetes"`, 6}, // a wrong JSON type: cniplug.DecodeConf
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := delegatetest.NewNode(t)
			_, _, err := n.Call(multi.Role, "ADD", delegatetest.Pod{ID: "cfg", Netns: "/run/netns/does-not-matter"}, muK8sConf(t, tt.extra))
			if err == nil || cniplug.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("ADD = %v (code %d), want %d naming %s", err, cniplug.CodeOf(err), tt.code, tt.field)
			}
		})
	}
}
