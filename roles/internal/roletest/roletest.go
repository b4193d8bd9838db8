// Package roletest runs one role's CNI calls in process against a real
// kernel and a store in a temporary directory, for the tests of the main
// roles (ptp, macvlan, ipvlan). It is imported only by _test.go files; the
// tests run in the private namespace of nstest.MainInPrivateNetns.
package roletest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// Versions are the spec versions every role speaks.
var Versions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// Node is the test's node: a store directory and the roles it answers as.
type Node struct {
	T   *testing.T
	Dir string
	Reg *cniplug.Registry
}

// NewNode returns a node with an empty store; it skips the test without
// root.
func NewNode(t *testing.T, roles ...*cniplug.Role) *Node {
	t.Helper()
	nstest.RequireRoot(t)
	return &Node{T: t, Dir: t.TempDir(), Reg: cniplug.NewRegistry(roles...)}
}

// Pod is a container ID and its network namespace.
type Pod struct{ ID, Netns string }

var seq int

// NewPod creates a pod namespace that the test removes at its end.
func (n *Node) NewPod(name string) Pod {
	seq++
	return Pod{ID: fmt.Sprintf("%s-%d", name, seq), Netns: nstest.NewNS(n.T, "rtpod")}
}

// Call runs one CNI call of role with conf on stdin, CNI_IFNAME eth0. extra
// are pairs that override the environment ("" deletes a variable).
func (n *Node) Call(role *cniplug.Role, cmd string, p Pod, conf []byte, extra ...string) ([]byte, error) {
	e := map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": p.ID,
		"CNI_NETNS":       p.Netns,
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/nonexistent",
		"CNI_ARGS":        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.ID,
		store.EnvDataDir:  n.Dir,
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
		Registry: n.Reg,
	})
	if err != nil {
		return out, fmt.Errorf("%w (stderr: %s)", err, stderr.String())
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

// Result decodes an ADD result of version v.
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

// Code returns the CNI code of err (0 for nil).
func Code(err error) uint {
	if err == nil {
		return 0
	}
	return cniplug.CodeOf(err)
}

// With returns conf with the given top-level fields set (prevResult,
// cni.dev/valid-attachments, ...).
func With(t *testing.T, conf []byte, fields map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WithPrev returns conf with prevResult set to an ADD's output.
func WithPrev(t *testing.T, conf, out []byte) []byte {
	return With(t, conf, map[string]any{"prevResult": json.RawMessage(out)})
}

// WithKeep returns conf with GC's valid attachments: eth0 of each pod.
func WithKeep(t *testing.T, conf []byte, keep ...Pod) []byte {
	va := []map[string]string{}
	for _, p := range keep {
		va = append(va, map[string]string{"containerID": p.ID, "ifname": "eth0"})
	}
	return With(t, conf, map[string]any{"cni.dev/valid-attachments": va})
}

// Endpoints returns the endpoint records of network.
func (n *Node) Endpoints(network string) []store.Endpoint {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	eps, err := st.Endpoints(network)
	if err != nil {
		n.T.Fatal(err)
	}
	return eps
}

// Reservations returns the IPAM reservations of network.
func (n *Node) Reservations(network string) []store.Reservation {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	var all []store.Reservation
	if err := st.ViewIPAM(network, func(tx *store.IPAMTx) error {
		all = tx.All()
		return nil
	}); err != nil {
		n.T.Fatal(err)
	}
	return all
}

// Empty fails the test unless network has no endpoint record and no
// reservation left.
func (n *Node) Empty(network string) {
	n.T.Helper()
	if eps := n.Endpoints(network); len(eps) > 0 {
		n.T.Errorf("endpoint records left in %s: %+v", network, eps)
	}
	if rs := n.Reservations(network); len(rs) > 0 {
		n.T.Errorf("reservations left in %s: %+v", network, rs)
	}
}
