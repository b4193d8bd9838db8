package meta_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/meta"
	"github.com/cnibox/cnibox/store"
)

// Helpers of the flannel and multi tests (names start with fm: other roles'
// tests share this package).

// fmTestRole is a plugin for the tests' chains whose verbs fail on demand:
// "failAdd", "failDel", "failStatus" in its config. Otherwise ADD passes
// prevResult on.
var fmTestRole = &cniplug.Role{
	Name: "cnibox-test-fail",
	Add: func(_ context.Context, a *cniplug.Args) (types.Result, error) {
		if fmFlag(a, "failAdd") {
			return nil, cniplug.Errorf(types.ErrIOFailure, "cnibox-test-fail: ADD fails as asked")
		}
		prev, err := a.Conf.PrevResult()
		if err != nil || prev != nil {
			return prev, err
		}
		return &current.Result{CNIVersion: current.ImplementedSpecVersion}, nil
	},
	Del: func(_ context.Context, a *cniplug.Args) error {
		if fmFlag(a, "failDel") {
			return cniplug.Errorf(types.ErrIOFailure, "cnibox-test-fail: DEL fails as asked")
		}
		return nil
	},
	Status: func(_ context.Context, a *cniplug.Args) error {
		if fmFlag(a, "failStatus") {
			return cniplug.Errorf(cniplug.CodeNotReady, "cnibox-test-fail: not ready as asked")
		}
		return nil
	},
}

func fmFlag(a *cniplug.Args, key string) bool {
	var m map[string]any
	json.Unmarshal(a.StdinData, &m)
	b, _ := m[key].(bool)
	return b
}

var fmRegistry = cniplug.NewRegistry(bridge.Role, hostlocal.Role, hostlocal.StaticRole,
	meta.Loopback, meta.Flannel, meta.Multi, fmTestRole)

// fmNode is a test's node: a store directory and extra environment that
// every call shares.
type fmNode struct {
	t   *testing.T
	dir string
	env map[string]string
}

func newFMNode(t *testing.T) *fmNode {
	t.Helper()
	nstest.RequireRoot(t)
	n := &fmNode{t: t, dir: t.TempDir(), env: map[string]string{}}
	// In-process delegates read the process's environment (as they do when
	// a runtime execs cnibox), so the store dir is set there too: a test
	// never touches the machine's store.
	t.Setenv(store.EnvDataDir, n.dir)
	return n
}

// fmPod is a pod: container ID and netns.
type fmPod struct{ id, netns string }

func (n *fmNode) newPod(name string) fmPod {
	n.t.Helper()
	return fmPod{id: fmt.Sprintf("%s-%d", name, time.Now().UnixNano()), netns: nstest.NewNS(n.t, "fm")}
}

// call runs one CNI call of role. stderr is returned for log assertions.
func (n *fmNode) call(role *cniplug.Role, cmd string, p fmPod, conf string) ([]byte, string, error) {
	e := map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": p.id,
		"CNI_NETNS":       p.netns,
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/nonexistent",
		"CNI_ARGS":        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.id,
		store.EnvDataDir:  n.dir,
	}
	if cmd == "GC" || cmd == "STATUS" {
		delete(e, "CNI_CONTAINERID")
		delete(e, "CNI_NETNS")
		delete(e, "CNI_IFNAME")
	}
	for k, v := range n.env {
		e[k] = v
	}
	var stderr bytes.Buffer
	out, err := cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv:   func(k string) string { return e[k] },
		Stdin:    strings.NewReader(conf),
		Stderr:   &stderr,
		Registry: fmRegistry,
	})
	return out, stderr.String(), err
}

// must runs a call that must succeed and returns stdout.
func (n *fmNode) must(role *cniplug.Role, cmd string, p fmPod, conf string) []byte {
	n.t.Helper()
	out, stderr, err := n.call(role, cmd, p, conf)
	if err != nil {
		n.t.Fatalf("%s %s %s: %v\nstderr: %s", role.Name, cmd, p.id, err, stderr)
	}
	return out
}

// add runs ADD and decodes the result.
func (n *fmNode) add(role *cniplug.Role, p fmPod, conf string) *current.Result {
	n.t.Helper()
	out := n.must(role, "ADD", p, conf)
	var r current.Result
	if err := json.Unmarshal(out, &r); err != nil {
		n.t.Fatalf("ADD result %s: %v", out, err)
	}
	return &r
}

// withPrev returns conf with prevResult set to r.
func withPrev(t *testing.T, conf string, r *current.Result) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = r
	b, _ := json.Marshal(m)
	return string(b)
}

// withKeep returns conf with GC's valid attachments.
func withKeep(t *testing.T, conf string, keep ...fmPod) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	list := []types.GCAttachment{}
	for _, p := range keep {
		list = append(list, types.GCAttachment{ContainerID: p.id, IfName: "eth0"})
	}
	m["cni.dev/valid-attachments"] = list
	b, _ := json.Marshal(m)
	return string(b)
}

// reservations returns the addresses reserved in network, by container ID.
func (n *fmNode) reservations(network string) map[string][]netip.Addr {
	n.t.Helper()
	st, err := store.Open(n.dir)
	if err != nil {
		n.t.Fatal(err)
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
func (n *fmNode) records(network string) []store.DelegateRecord {
	n.t.Helper()
	st, err := store.Open(n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.DelegateRecords(network)
	if err != nil {
		n.t.Fatal(err)
	}
	return recs
}

func (n *fmNode) deleteRecord(network string, p fmPod) {
	n.t.Helper()
	st, err := store.Open(n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	defer st.Close()
	if err := st.DeleteDelegateRecord(network, p.id, "eth0"); err != nil {
		n.t.Fatal(err)
	}
}

// fmVeths returns cnibox's host veths on the node.
func fmVeths(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range fmLinks(t, "") {
		if l.Kind == "veth" && strings.HasPrefix(l.Name, "cbx") {
			out = append(out, l.Name)
		}
	}
	return out
}

// fmLinks returns the links of a namespace ("" = the node).
func fmLinks(t *testing.T, ns string) map[string]netops.Link {
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

// fmIP returns the first IPv4 address of a result on interface ifname.
func fmIP(t *testing.T, r *current.Result, ifname string) netip.Addr {
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

// fmReachable reports whether a TCP connection from namespace from reaches a
// listener in namespace to on ip.
func fmReachable(t *testing.T, from, to string, ip netip.Addr) error {
	t.Helper()
	var ln net.Listener
	if err := nstest.Run(t, to, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		return err
	}); err != nil {
		return fmt.Errorf("listen in %s: %w", to, err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	return nstest.Run(t, from, func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = c.Read(buf)
		return err
	})
}
