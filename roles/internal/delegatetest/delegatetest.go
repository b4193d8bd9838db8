// Package delegatetest runs the flannel and multi roles (and the roles they
// delegate to) in process against a real kernel and a store in a temporary
// directory, for their tests. Only _test.go files import it.
package delegatetest

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/flannel"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/loopback"
	"github.com/cnibox/cnibox/roles/multi"
	"github.com/cnibox/cnibox/roles/static"
	"github.com/cnibox/cnibox/store"
)

// TestRole is a plugin for the tests' chains whose verbs fail on demand:
// "failAdd", "failDel", "failStatus" in its config. Otherwise ADD passes
// prevResult on.
var TestRole = &cniplug.Role{
	Name: "cnibox-test-fail",
	Verbs: &cniplug.ConfVerbs[cniplug.NoConf]{Add: func(_ context.Context, a *cniplug.Args, _ cniplug.NoConf) (types.Result, error) {
		if flag(a, "failAdd") {
			return nil, cniplug.Errorf(types.ErrIOFailure, "cnibox-test-fail: ADD fails as asked")
		}
		prev, err := a.Conf.PrevResult()
		if err != nil || prev != nil {
			return prev, err
		}
		return &current.Result{CNIVersion: current.ImplementedSpecVersion}, nil
	},
		Del: func(_ context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
			if flag(a, "failDel") {
				return cniplug.Errorf(types.ErrIOFailure, "cnibox-test-fail: DEL fails as asked")
			}
			return nil
		},
		Status: func(_ context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
			if flag(a, "failStatus") {
				return cniplug.Errorf(cniplug.CodeNotReady, "cnibox-test-fail: not ready as asked")
			}
			return nil
		},
	},
}

func flag(a *cniplug.Args, key string) bool {
	var m map[string]any
	json.Unmarshal(a.StdinData, &m)
	b, _ := m[key].(bool)
	return b
}

// Registry is the roles the tests' chains and delegations can name.
var Registry = cniplug.NewRegistry(bridge.Role, hostlocal.Role, static.Role,
	loopback.Role, flannel.Role, multi.Role, TestRole)

// Node is a test's node: a roletest node whose calls take their config as
// a string and return the role's stderr apart.
type Node struct{ *roletest.Node }

// Pod is a pod: container ID and netns.
type Pod = roletest.Pod

// NewNode returns a node with an empty store; it skips the test without
// root.
func NewNode(t *testing.T) *Node {
	t.Helper()
	n := &Node{roletest.NewNodeWith(t, Registry)}
	// In-process delegates read the process's environment (as they do when
	// a runtime execs cnibox), so the store dir is set there too: a test
	// never touches the machine's store (nor reads the machine's records
	// of the reference host-local).
	t.Setenv(store.EnvDataDir, n.Dir)
	t.Setenv(hostlocal.EnvRefDataDir, roletest.RefDataDir(n.Dir))
	return n
}

// Call runs one CNI call of role. stderr is returned for log assertions.
func (n *Node) Call(role *cniplug.Role, cmd string, p Pod, conf string) ([]byte, string, error) {
	return n.Run(role, cmd, p, []byte(conf))
}

// Must runs a call that must succeed and returns stdout.
func (n *Node) Must(role *cniplug.Role, cmd string, p Pod, conf string) []byte {
	n.T.Helper()
	return n.Node.Must(role, cmd, p, []byte(conf))
}

// Add runs ADD and decodes the result.
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
	return string(roletest.With(t, []byte(conf), map[string]any{"prevResult": r}))
}

// WithKeep returns conf with GC's valid attachments.
func WithKeep(t *testing.T, conf string, keep ...Pod) string {
	t.Helper()
	return string(roletest.WithKeep(t, []byte(conf), keep...))
}

// Reservations returns the addresses reserved in network, by container ID.
func (n *Node) Reservations(network string) map[string][]netip.Addr {
	n.T.Helper()
	out := map[string][]netip.Addr{}
	for _, r := range n.Node.Reservations(network) {
		out[r.ContainerID] = append(out[r.ContainerID], r.Addr)
	}
	return out
}

// Records returns the delegate records of network.
func (n *Node) Records(network string) []delegaterec.Record {
	n.T.Helper()
	return roletest.Look(n.Node, func(st *store.Store) ([]delegaterec.Record, error) { return delegaterec.Records.In(st).List(network) })
}

// DeleteRecord deletes the delegate record of eth0 of p in network.
func (n *Node) DeleteRecord(network string, p Pod) {
	n.T.Helper()
	n.Store(func(st *store.Store) error { return delegaterec.Records.In(st).Delete(network, p.ID, "eth0") })
}

// CheckKept checks what a GC that kept only keep leaves: the delegate
// record of network is keep's alone, and keep passes CHECK (against prev)
// and two DELs, after which no veth is left.
func (n *Node) CheckKept(role *cniplug.Role, network string, keep Pod, conf string, prev *current.Result) {
	t := n.T
	t.Helper()
	if recs := n.Records(network); len(recs) != 1 || recs[0].ContainerID != keep.ID {
		t.Errorf("records after GC: %+v, want %s's only", recs, keep.ID)
	}
	n.Must(role, "CHECK", keep, WithPrev(t, conf, prev))
	n.Must(role, "DEL", keep, conf)
	n.Must(role, "DEL", keep, conf)
	if got := Veths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
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
	out := map[string]netops.Link{}
	for _, l := range roletest.InNS(t, ns, (*netops.Handle).Links) {
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
	// flannel's own records: a directory that does not exist (this node
	// never ran flannel's plugin) unless a test makes it; never the
	// machine's /var/lib/cni/flannel.
	data := filepath.Join(t.TempDir(), "flannel-data")
	n.Env[flannel.EnvFlannelDataDir] = data
	t.Setenv(flannel.EnvFlannelDataDir, data)
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
