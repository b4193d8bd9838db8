package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// env is one test's node: a plugin dir of cnibox symlinks, a data dir and a
// libcni cache dir.
type env struct {
	t        *testing.T
	binDir   string
	dataDir  string
	cacheDir string
	logFile  string
	cni      *libcni.CNIConfig
}

// built is the test process's own build of cnibox (cniboxBin), in a
// directory of its own that TestMain removes: never a fixed name in /tmp,
// which another user's run would own.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// cniboxBin is the binary under test: $CNIBOX_BIN (make test sets it) or a
// build of this process's, made once.
func cniboxBin(t testing.TB) string {
	if p := os.Getenv("CNIBOX_BIN"); p != "" {
		return p
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "cnibox-e2e-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "cnibox")
		cmd := exec.Command("go", "build", "-o", built.path, "github.com/cnibox/cnibox")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build cnibox: %v\n%s", err, b)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// removeBuilt removes cniboxBin's build, if it made one.
func removeBuilt() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if !testenv.Root() {
		t.Skip("needs root")
	}
	e := &env{t: t, binDir: t.TempDir(), dataDir: t.TempDir(), cacheDir: t.TempDir()}
	out, err := exec.Command(cniboxBin(t), "install", "--dir", e.binDir).CombinedOutput()
	if err != nil {
		t.Fatalf("cnibox install: %v\n%s", err, out)
	}
	// Every plugin process inherits the data dir, so the test's store is private.
	t.Setenv("CNIBOX_DATA_DIR", e.dataDir)
	e.logFile = filepath.Join(e.dataDir, "cnibox.log")
	t.Setenv("CNIBOX_LOG_FILE", e.logFile)
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{e.binDir}, e.cacheDir, newExec())
	return e
}

// conflist loads a conflist file, or fails the test.
func loadList(t *testing.T, path string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromFile(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return l
}

// listFromJSON builds a conflist from JSON text.
func listFromJSON(t *testing.T, s string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromBytes([]byte(s))
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, s)
	}
	return l
}

// withVersion returns the conflist with its cniVersion replaced.
func withVersion(t *testing.T, l *libcni.NetworkConfigList, v string) *libcni.NetworkConfigList {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(l.Bytes, &m); err != nil {
		t.Fatal(err)
	}
	m["cniVersion"] = v
	b, _ := json.Marshal(m)
	return listFromJSON(t, string(b))
}

type pod struct {
	id    string
	netns string
	rt    *libcni.RuntimeConf
}

var podSeq int

func (e *env) newPod(name string) *pod {
	e.t.Helper()
	podSeq++
	ns := nstest.NewNS(e.t, "e2e")
	id := fmt.Sprintf("%s-%d-%d", name, os.Getpid(), podSeq)
	return &pod{id: id, netns: ns, rt: &libcni.RuntimeConf{
		ContainerID: id, NetNS: ns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}},
	}}
}

func (e *env) add(l *libcni.NetworkConfigList, p *pod) *current.Result {
	e.t.Helper()
	r, err := e.cni.AddNetworkList(context.Background(), l, p.rt)
	if err != nil {
		e.t.Fatalf("ADD %s on %s: %v", p.id, l.Name, err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		e.t.Fatalf("ADD result: %v", err)
	}
	return res
}

func (e *env) del(l *libcni.NetworkConfigList, p *pod) {
	e.t.Helper()
	if err := e.cni.DelNetworkList(context.Background(), l, p.rt); err != nil {
		e.t.Fatalf("DEL %s on %s: %v", p.id, l.Name, err)
	}
}

// podIP returns the first address of the given family in a result.
func podIP(t *testing.T, r *current.Result, v4 bool) netip.Addr {
	t.Helper()
	for _, ipc := range r.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		a = a.Unmap()
		if a.Is4() == v4 {
			return a
		}
	}
	t.Fatalf("no IPv%s address in result %v", map[bool]string{true: "4", false: "6"}[v4], r)
	return netip.Addr{}
}

// reachable reports whether a TCP connection from netns "from" reaches a
// listener in netns "to" on address ip (nstest.Reachable).
func reachable(t *testing.T, from, to string, ip netip.Addr) error {
	t.Helper()
	return nstest.Reachable(t, from, to, ip)
}

// ourVeths returns the host veths cnibox created on the node.
func ourVeths(t *testing.T) []string {
	t.Helper()
	h := hostHandle(t)
	ls, err := h.Links()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		if l.Kind == "veth" && strings.HasPrefix(l.Name, "cbx") {
			out = append(out, l.Name)
		}
	}
	return out
}

// reservations returns every IPAM reservation of a network in the store.
func (e *env) reservations(network string) []store.Reservation {
	e.t.Helper()
	st, err := store.Open(e.dataDir)
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	var all []store.Reservation
	if err := st.ViewIPAM(network, func(tx *store.IPAMTx) error {
		all = tx.All()
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return all
}

// masqEntries returns the pod IPs with a masquerade entry on the node.
func masqEntries(t *testing.T) []netip.Addr {
	t.Helper()
	h, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	es, err := h.NFT().MasqEntries()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, e := range es {
		out = append(out, e.PodIP)
	}
	return out
}

// cacheFiles lists what libcni left in its cache dir.
func cacheFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func hostHandle(t *testing.T) *netops.Handle {
	t.Helper()
	h, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func bridgeOpts(name string) netops.BridgeOpts { return netops.BridgeOpts{Name: name} }
func addrOpts() netops.AddrOpts                { return netops.AddrOpts{NoDAD: true} }

// podLinks returns the link names in a pod namespace.
func podLinks(t *testing.T, ns string) []string {
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
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	return names
}

func mustCurrent(t *testing.T, r types.Result) *current.Result {
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Error(err)
		return &current.Result{}
	}
	return res
}

// newDownNS creates a pod namespace with its loopback still down, as a
// runtime hands it to the loopback plugin.
func newDownNS(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("e2e-lo-%d-%d", os.Getpid(), podSeq)
	podSeq++
	path, err := netops.CreateNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netops.DeleteNamedNS(name) })
	nstest.SetBaseSysctls(t, path)
	return path
}
