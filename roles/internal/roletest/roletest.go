// Package roletest runs one role's CNI calls in process against a real
// kernel and a store in a temporary directory, for the tests of the roles.
// chaintest and delegatetest build their nodes on it. It is imported only
// by _test.go files; the tests run in the private namespace of
// nstest.MainInPrivateNetns.
package roletest

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// Versions are the spec versions every role speaks.
var Versions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// Node is the test's node: a store directory, the roles it answers as and
// the environment every call shares (over Run's defaults, under a call's
// extra pairs).
type Node struct {
	T   *testing.T
	Dir string
	Reg *cniplug.Registry
	Env map[string]string
}

// NewNode returns a node with an empty store that answers as roles; it
// skips the test without root.
func NewNode(t *testing.T, roles ...*cniplug.Role) *Node {
	t.Helper()
	return NewNodeWith(t, cniplug.NewRegistry(roles...))
}

// NewNodeWith is NewNode for a registry the caller built.
func NewNodeWith(t *testing.T, reg *cniplug.Registry) *Node {
	t.Helper()
	nstest.RequireRoot(t)
	return &Node{T: t, Dir: t.TempDir(), Reg: reg, Env: map[string]string{}}
}

// Pod is a container ID and its network namespace.
type Pod struct{ ID, Netns string }

var seq atomic.Int64

// NewPod creates a pod namespace that the test removes at its end.
func (n *Node) NewPod(name string) Pod {
	n.T.Helper()
	return Pod{ID: fmt.Sprintf("%s-%d", name, seq.Add(1)), Netns: nstest.NewNS(n.T, "rtpod")}
}

// Run runs one CNI call of role with stdin and returns its stdout and what
// it wrote to stderr. The environment is that of pod p with CNI_IFNAME
// eth0 (none for GC and STATUS), the pod's name in CNI_ARGS and the node's
// store, then n.Env, then extra: pairs that override it ("" deletes a
// variable).
func (n *Node) Run(role *cniplug.Role, cmd string, p Pod, stdin []byte, extra ...string) ([]byte, string, error) {
	e := map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": p.ID,
		"CNI_NETNS":       p.Netns,
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/nonexistent",
		"CNI_ARGS":        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.ID,
		store.EnvDataDir:  n.Dir,
		EnvRefDataDir:     RefDataDir(n.Dir),
	}
	if cmd == "GC" || cmd == "STATUS" {
		delete(e, "CNI_CONTAINERID")
		delete(e, "CNI_NETNS")
		delete(e, "CNI_IFNAME")
	}
	set := func(k, v string) {
		if v == "" {
			delete(e, k)
		} else {
			e[k] = v
		}
	}
	for k, v := range n.Env {
		set(k, v)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		set(extra[i], extra[i+1])
	}
	var stderr bytes.Buffer
	out, err := cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv:   func(k string) string { return e[k] },
		Stdin:    bytes.NewReader(stdin),
		Stderr:   &stderr,
		Registry: n.Reg,
	})
	return out, stderr.String(), err
}

// Call is Run with the role's stderr in the error.
func (n *Node) Call(role *cniplug.Role, cmd string, p Pod, conf []byte, extra ...string) ([]byte, error) {
	out, stderr, err := n.Run(role, cmd, p, conf, extra...)
	if err != nil {
		return out, fmt.Errorf("%w (stderr: %s)", err, stderr)
	}
	return out, nil
}

// Must is Call that fails the test on an error.
func (n *Node) Must(role *cniplug.Role, cmd string, p Pod, conf []byte, extra ...string) []byte {
	n.T.Helper()
	out, err := n.Call(role, cmd, p, conf, extra...)
	if err != nil {
		n.T.Fatalf("%s %s %s: %v", role.Name, cmd, p.ID, err)
	}
	return out
}
