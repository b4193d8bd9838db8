// Package chaintest runs the tuning and bandwidth roles after bridge +
// host-local in process against a real kernel and a store in a temporary
// directory, for their tests. Only _test.go files import it.
package chaintest

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
	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/tuning"
	"github.com/cnibox/cnibox/store"
)

// Helpers of the tuning and bandwidth tests (names start with tb: other
// roles' tests share this package).

var Registry = cniplug.NewRegistry(bridge.Role, hostlocal.Role, tuning.Role, bandwidth.Role)

var Versions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// Node is the test's node (the test process's private namespace) with a
// store directory and one bridge network.
type Node struct {
	T         *testing.T
	Dir       string
	Network   string
	Bridge    string
	Subnet    string
	Allowlist string // CNIBOX_TUNING_ALLOWLIST; a missing file by default
}

var tbBridgeSeq int

func NewNode(t *testing.T) *Node {
	t.Helper()
	nstest.RequireRoot(t)
	tbBridgeSeq++
	n := &Node{T: t, Dir: t.TempDir(), Network: "tbnet", Bridge: fmt.Sprintf("cbxtb%d", tbBridgeSeq),
		Subnet: fmt.Sprintf("10.78.%d.0/24", tbBridgeSeq)}
	n.Allowlist = filepath.Join(n.Dir, "no-allowlist.conf")
	t.Cleanup(func() {
		host, err := netops.Open("")
		if err == nil {
			host.DeleteLink(n.Bridge)
			host.Close()
		}
	})
	return n
}

// Pod is a pod: container ID and netns.
type Pod struct{ ID, Netns string }

var tbSeq int

func (n *Node) NewPod(name string) Pod {
	tbSeq++
	return Pod{ID: fmt.Sprintf("%s-%d", name, tbSeq), Netns: nstest.NewNS(n.T, "tbpod")}
}

// call runs one CNI call of role with conf on stdin. extra overrides the
// environment ("" deletes a variable).
func (n *Node) Call(role *cniplug.Role, cmd string, p Pod, conf []byte, extra ...string) ([]byte, error) {
	e := map[string]string{
		"CNI_COMMAND":             cmd,
		"CNI_CONTAINERID":         p.ID,
		"CNI_NETNS":               p.Netns,
		"CNI_IFNAME":              "eth0",
		"CNI_PATH":                "/nonexistent",
		"CNI_ARGS":                "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.ID,
		store.EnvDataDir:          n.Dir,
		tuning.TuningAllowlistEnv: n.Allowlist,
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
		Registry: Registry,
	})
	if err != nil {
		return out, fmt.Errorf("%w (stderr: %s)", err, stderr.String())
	}
	return out, nil
}

func (n *Node) Must(role *cniplug.Role, cmd string, p Pod, conf []byte, extra ...string) []byte {
	n.T.Helper()
	out, err := n.Call(role, cmd, p, conf, extra...)
	if err != nil {
		n.T.Fatalf("%s %s %s: %v", role.Name, cmd, p.ID, err)
	}
	return out
}

// bridgeConf is the main plugin's config of the node's network.
func (n *Node) BridgeConf(version string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]]}}`, version, n.Network, n.Bridge, n.Subnet))
}

// conf builds a chained plugin's config: fields, plus name, cniVersion,
// type and (when prev is not nil) prevResult.
func (n *Node) Conf(version, typ string, fields map[string]any, prev []byte) []byte {
	m := map[string]any{"cniVersion": version, "name": n.Network, "type": typ}
	for k, v := range fields {
		m[k] = v
	}
	if prev != nil {
		m["prevResult"] = json.RawMessage(prev)
	}
	b, err := json.Marshal(m)
	if err != nil {
		n.T.Fatal(err)
	}
	return b
}

// withKeep adds GC's valid attachments (eth0 of each pod) to conf.
func (n *Node) WithKeep(conf []byte, keep ...Pod) []byte {
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		n.T.Fatal(err)
	}
	var va []map[string]string
	for _, p := range keep {
		va = append(va, map[string]string{"containerID": p.ID, "ifname": "eth0"})
	}
	m["cni.dev/valid-attachments"] = va
	b, _ := json.Marshal(m)
	return b
}

// Result decodes an ADD result of the given version.
func Result(t *testing.T, out []byte, v string) *current.Result {
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

// Link returns the settings of a link, or fails the test.
func Link(t *testing.T, ns, name string) netops.LinkSettings {
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

// Sysctl reads a sysctl in a namespace.
func Sysctl(t *testing.T, ns, key string) string {
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

// Code returns the CNI code of err (0 for nil).
func Code(err error) uint {
	if err == nil {
		return 0
	}
	return cniplug.CodeOf(err)
}
