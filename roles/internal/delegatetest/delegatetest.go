// Package delegatetest runs the flannel and multi roles (and the roles they
// delegate to) in process against a real kernel and a store in a temporary
// directory, for their tests. Only _test.go files import it.
package delegatetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/flannel"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/loopback"
	"github.com/cnibox/cnibox/roles/multi"
	"github.com/cnibox/cnibox/store"
)

// Helpers of the flannel and multi tests (names start with fm: other roles'
// tests share this package).

// TestRole is a plugin for the tests' chains whose verbs fail on demand:
// "failAdd", "failDel", "failStatus" in its config. Otherwise ADD passes
// prevResult on.
var TestRole = &cniplug.Role{
	Name: "cnibox-test-fail",
	Add: func(_ context.Context, a *cniplug.Args) (types.Result, error) {
		if flag(a, "failAdd") {
			return nil, cniplug.Errorf(types.ErrIOFailure, "cnibox-test-fail: ADD fails as asked")
		}
		prev, err := a.Conf.PrevResult()
		if err != nil || prev != nil {
			return prev, err
		}
		return &current.Result{CNIVersion: current.ImplementedSpecVersion}, nil
	},
	Del: func(_ context.Context, a *cniplug.Args) error {
		if flag(a, "failDel") {
			return cniplug.Errorf(types.ErrIOFailure, "cnibox-test-fail: DEL fails as asked")
		}
		return nil
	},
	Status: func(_ context.Context, a *cniplug.Args) error {
		if flag(a, "failStatus") {
			return cniplug.Errorf(cniplug.CodeNotReady, "cnibox-test-fail: not ready as asked")
		}
		return nil
	},
}

func flag(a *cniplug.Args, key string) bool {
	var m map[string]any
	json.Unmarshal(a.StdinData, &m)
	b, _ := m[key].(bool)
	return b
}

var Registry = cniplug.NewRegistry(bridge.Role, hostlocal.Role, hostlocal.StaticRole,
	loopback.Role, flannel.Role, multi.Role, TestRole)

// Node is a test's node: a store directory and extra environment that
// every call shares.
type Node struct {
	T   *testing.T
	Dir string
	Env map[string]string
}

func NewNode(t *testing.T) *Node {
	t.Helper()
	nstest.RequireRoot(t)
	n := &Node{T: t, Dir: t.TempDir(), Env: map[string]string{}}
	// In-process delegates read the process's environment (as they do when
	// a runtime execs cnibox), so the store dir is set there too: a test
	// never touches the machine's store.
	t.Setenv(store.EnvDataDir, n.Dir)
	return n
}

// Pod is a pod: container ID and netns.
type Pod struct{ ID, Netns string }

func (n *Node) NewPod(name string) Pod {
	n.T.Helper()
	return Pod{ID: fmt.Sprintf("%s-%d", name, time.Now().UnixNano()), Netns: nstest.NewNS(n.T, "fm")}
}

// call runs one CNI call of role. stderr is returned for log assertions.
func (n *Node) Call(role *cniplug.Role, cmd string, p Pod, conf string) ([]byte, string, error) {
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
	for k, v := range n.Env {
		e[k] = v
	}
	var stderr bytes.Buffer
	out, err := cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv:   func(k string) string { return e[k] },
		Stdin:    strings.NewReader(conf),
		Stderr:   &stderr,
		Registry: Registry,
	})
	return out, stderr.String(), err
}

// must runs a call that must succeed and returns stdout.
func (n *Node) Must(role *cniplug.Role, cmd string, p Pod, conf string) []byte {
	n.T.Helper()
	out, stderr, err := n.Call(role, cmd, p, conf)
	if err != nil {
		n.T.Fatalf("%s %s %s: %v\nstderr: %s", role.Name, cmd, p.ID, err, stderr)
	}
	return out
}

// add runs ADD and decodes the result.
func (n *Node) Add(role *cniplug.Role, p Pod, conf string) *current.Result {
	n.T.Helper()
	out := n.Must(role, "ADD", p, conf)
	var r current.Result
	if err := json.Unmarshal(out, &r); err != nil {
		n.T.Fatalf("ADD result %s: %v", out, err)
	}
	return &r
}

// WithPrev returns conf with prevResult set to r.
func WithPrev(t *testing.T, conf string, r *current.Result) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = r
	b, _ := json.Marshal(m)
	return string(b)
}

// WithKeep returns conf with GC's valid attachments.
func WithKeep(t *testing.T, conf string, keep ...Pod) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	list := []types.GCAttachment{}
	for _, p := range keep {
		list = append(list, types.GCAttachment{ContainerID: p.ID, IfName: "eth0"})
	}
	m["cni.dev/valid-attachments"] = list
	b, _ := json.Marshal(m)
	return string(b)
}

// reservations returns the addresses reserved in network, by container ID.
func (n *Node) Reservations(network string) map[string][]netip.Addr {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	out := map[string][]netip.Addr{}
	st.ViewIPAM(network, func(tx *store.IPAMTx) error {
		for _, r := range tx.All() {
			out[r.ContainerID] = append(out[r.ContainerID], r.Addr)
		}
		return nil
	})
	return out
}

// records returns the delegate records of network.
func (n *Node) Records(network string) []store.DelegateRecord {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	recs, err := st.DelegateRecords(network)
	if err != nil {
		n.T.Fatal(err)
	}
	return recs
}

func (n *Node) DeleteRecord(network string, p Pod) {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	if err := st.DeleteDelegateRecord(network, p.ID, "eth0"); err != nil {
		n.T.Fatal(err)
	}
}

// Veths returns cnibox's host veths on the node.
func Veths(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range Links(t, "") {
		if l.Kind == "veth" && strings.HasPrefix(l.Name, "cbx") {
			out = append(out, l.Name)
		}
	}
	return out
}

// Links returns the links of a namespace ("" = the node).
func Links(t *testing.T, ns string) map[string]netops.Link {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ls, err := h.Links()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]netops.Link{}
	for _, l := range ls {
		out[l.Name] = l
	}
	return out
}

// IP returns the first IPv4 address of a result on interface ifname.
func IP(t *testing.T, r *current.Result, ifname string) netip.Addr {
	t.Helper()
	for _, ipc := range r.IPs {
		if ipc.Interface != nil && *ipc.Interface < len(r.Interfaces) && r.Interfaces[*ipc.Interface].Name != ifname {
			continue
		}
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		if a = a.Unmap(); a.Is4() {
			return a
		}
	}
	t.Fatalf("no IPv4 address on %s in result %+v", ifname, r)
	return netip.Addr{}
}

// FlannelNode is a node whose flanneld wrote subnet.env for subnet (x.y.z.1/24
// of 10.244.0.0/16, MTU 1450, flanneld masquerading).
func FlannelNode(t *testing.T, subnet string) (*Node, string) {
	n := NewNode(t)
	path := filepath.Join(t.TempDir(), "subnet.env")
	WriteSubnetEnv(t, path, subnet)
	n.Env[flannel.EnvFlannelSubnetFile] = path
	t.Setenv(flannel.EnvFlannelSubnetFile, path) // for flannel as a delegate
	return n, path
}

// WriteSubnetEnv writes a subnet.env as flanneld does for subnet.
func WriteSubnetEnv(t *testing.T, path, subnet string) {
	t.Helper()
	data := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=" + subnet + "\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
