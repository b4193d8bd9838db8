package meta_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/meta"
	"github.com/cnibox/cnibox/store"
)

// Helpers of the tuning and bandwidth tests (names start with tb: other
// roles' tests share this package).

var tbRegistry = cniplug.NewRegistry(bridge.Role, hostlocal.Role, meta.Tuning, meta.Bandwidth)

var tbVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// tbNode is the test's node (the test process's private namespace) with a
// store directory and one bridge network.
type tbNode struct {
	t         *testing.T
	dir       string
	network   string
	bridge    string
	subnet    string
	allowlist string // CNIBOX_TUNING_ALLOWLIST; a missing file by default
}

var tbBridgeSeq int

func newTBNode(t *testing.T) *tbNode {
	t.Helper()
	nstest.RequireRoot(t)
	tbBridgeSeq++
	n := &tbNode{t: t, dir: t.TempDir(), network: "tbnet", bridge: fmt.Sprintf("cbxtb%d", tbBridgeSeq),
		subnet: fmt.Sprintf("10.78.%d.0/24", tbBridgeSeq)}
	n.allowlist = filepath.Join(n.dir, "no-allowlist.conf")
	t.Cleanup(func() {
		host, err := netops.Open("")
		if err == nil {
			host.DeleteLink(n.bridge)
			host.Close()
		}
	})
	return n
}

// tbPod is a pod: container ID and netns.
type tbPod struct{ id, netns string }

var tbSeq int

func (n *tbNode) newPod(name string) tbPod {
	tbSeq++
	return tbPod{id: fmt.Sprintf("%s-%d", name, tbSeq), netns: nstest.NewNS(n.t, "tbpod")}
}

// call runs one CNI call of role with conf on stdin. extra overrides the
// environment ("" deletes a variable).
func (n *tbNode) call(role *cniplug.Role, cmd string, p tbPod, conf []byte, extra ...string) ([]byte, error) {
	e := map[string]string{
		"CNI_COMMAND":           cmd,
		"CNI_CONTAINERID":       p.id,
		"CNI_NETNS":             p.netns,
		"CNI_IFNAME":            "eth0",
		"CNI_PATH":              "/nonexistent",
		"CNI_ARGS":              "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.id,
		store.EnvDataDir:        n.dir,
		meta.TuningAllowlistEnv: n.allowlist,
	}
	if cmd == "GC" || cmd == "STATUS" {
		delete(e, "CNI_CONTAINERID")
		delete(e, "CNI_NETNS")
		delete(e, "CNI_IFNAME")
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			delete(e, extra[i])
		} else {
			e[extra[i]] = extra[i+1]
		}
	}
	var stderr bytes.Buffer
	out, err := cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv:   func(k string) string { return e[k] },
		Stdin:    bytes.NewReader(conf),
		Stderr:   &stderr,
		Registry: tbRegistry,
	})
	if err != nil {
		return out, fmt.Errorf("%w (stderr: %s)", err, stderr.String())
	}
	return out, nil
}

func (n *tbNode) must(role *cniplug.Role, cmd string, p tbPod, conf []byte, extra ...string) []byte {
	n.t.Helper()
	out, err := n.call(role, cmd, p, conf, extra...)
	if err != nil {
		n.t.Fatalf("%s %s %s: %v", role.Name, cmd, p.id, err)
	}
	return out
}

// bridgeConf is the main plugin's config of the node's network.
func (n *tbNode) bridgeConf(version string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]]}}`, version, n.network, n.bridge, n.subnet))
}

// conf builds a chained plugin's config: fields, plus name, cniVersion,
// type and (when prev is not nil) prevResult.
func (n *tbNode) conf(version, typ string, fields map[string]any, prev []byte) []byte {
	m := map[string]any{"cniVersion": version, "name": n.network, "type": typ}
	for k, v := range fields {
		m[k] = v
	}
	if prev != nil {
		m["prevResult"] = json.RawMessage(prev)
	}
	b, err := json.Marshal(m)
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// withKeep adds GC's valid attachments (eth0 of each pod) to conf.
func (n *tbNode) withKeep(conf []byte, keep ...tbPod) []byte {
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		n.t.Fatal(err)
	}
	var va []map[string]string
	for _, p := range keep {
		va = append(va, map[string]string{"containerID": p.id, "ifname": "eth0"})
	}
	m["cni.dev/valid-attachments"] = va
	b, _ := json.Marshal(m)
	return b
}

// tbResult decodes an ADD result of the given version.
func tbResult(t *testing.T, out []byte, v string) *current.Result {
	t.Helper()
	r, err := version.NewResult(v, out)
	if err != nil {
		t.Fatalf("result %s: %v", out, err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatalf("result %s: %v", out, err)
	}
	return res
}

// tbLink returns the settings of a link, or fails the test.
func tbLink(t *testing.T, ns, name string) netops.LinkSettings {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := h.LinkSettings(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tbSysctl reads a sysctl in a namespace.
func tbSysctl(t *testing.T, ns, key string) string {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	v, err := h.Sysctl(key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// tbCode returns the CNI code of err (0 for nil).
func tbCode(err error) uint {
	if err == nil {
		return 0
	}
	return cniplug.CodeOf(err)
}
