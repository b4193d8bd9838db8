// Package overlay tests cnibox's VXLAN overlay as a small cluster on one
// machine: an "underlay" bridge in a namespace of its own, a namespace per
// node with a veth onto it, a real etcd (Debian's etcd-server) on the
// underlay, one cnibox-agent per node running inside the node's namespace,
// and pods added through libcni with a vxlan conflist. The test process
// itself runs in a private namespace (its own veth onto the underlay), so
// nothing touches the machine's network.
package overlay

import (
	testbin "github.com/cnibox/cnibox/test/internal/binaries"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

func TestMain(m *testing.M) {
	findFlanneld()
	nstest.MainInPrivateNetns(m)
}

const (
	underlayNet = "192.168.77.0/24"
	etcdAddr    = "192.168.77.1"
	etcdPrefix  = "/coreos.com/network"
	device      = "flannel.1"
)

// waitFor bounds the waits for the cluster to settle; it is a deadline for
// a failure message, never a speed assertion.
const waitFor = 30 * time.Second

// binaries returns cnibox and cnibox-agent: $CNIBOX_BIN and the agent next
// to it (make test), else fresh builds.
func binaries(t *testing.T) (cnibox, agent string) {
	t.Helper()
	return testbin.CniboxAndAgent(t, "cnibox-agent")
}

// cluster is the test's machines.
type cluster struct {
	t         *testing.T
	underlay  string // namespace path
	cniboxBin string
	agentBin  string
	binDir    string // CNI plugin dir (cnibox symlinks)
	etcd      *clientv3.Client
	nodes     []*node
	// leaseSource lists the leases of the backend in use (etcd or kube).
	leaseSource func() map[netip.Prefix]lease.Lease
	// agentArgs are the backend flags of a node's agent (nil: etcd).
	agentArgs func(*node) []string
	// netConf is a node's conflist (nil: the vxlan role's).
	netConf func(*node) string
	// kcpArgs are the control plane's cluster CIDR and node mask
	// (kube.Start's; nil: 10.244.0.0/16 and 24).
	//lint:ignore U1000 set and read by the tests built with -tags kube (kube_test.go)
	kcpArgs []string
	// v6Only: the pods have IPv6 addresses only (an IPv6-only network).
	v6Only bool
}

// node is one machine of the cluster.
type node struct {
	c          *cluster
	name       string
	ns         string
	ip         netip.Addr
	dataDir    string
	subnetFile string
	cacheDir   string
	cni        *libcni.CNIConfig
	agent      *exec.Cmd
	agentDone  chan error
	logPath    string
	runs       int
	// env is added to the agent's environment (FLANNELD_*, POD_NAME, ...).
	env []string
}

// newCluster builds the underlay with n nodes and starts etcd on it.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	if !testenv.Root() {
		t.Skip("needs root")
	}
	cnibox, agentBin := binaries(t)
	c := &cluster{t: t, cniboxBin: cnibox, agentBin: agentBin, binDir: t.TempDir()}
	if out, err := exec.Command(cnibox, "install", "--dir", c.binDir).CombinedOutput(); err != nil {
		t.Fatalf("cnibox install: %v\n%s", err, out)
	}

	c.underlay = nstest.NewNS(t, "ovl-ul")
	ul := openH(t, c.underlay)
	_, err := ul.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	must(t, ul.EnsureAddr("br0", netip.MustParsePrefix(etcdAddr+"/24"), netops.AddrOpts{NoDAD: true}))
	// The test process reaches etcd through a veth of its own.
	self := openH(t, "")
	_, _, err = ul.EnsureVeth(netops.VethOpts{HostName: "ul-test", PeerName: "ul0", Peer: self, Master: "br0"})
	must(t, err)
	t.Cleanup(func() { self.DeleteLink("ul0") }) // the namespace's end goes later, asynchronously
	must(t, self.EnsureAddr("ul0", netip.MustParsePrefix("192.168.77.254/24"), netops.AddrOpts{NoDAD: true}))

	for i := 1; i <= n; i++ {
		c.addNode(ul, i)
	}
	return c
}

func (c *cluster) addNode(ul *netops.Handle, i int) *node {
	t := c.t
	nd := &node{
		c: c, name: fmt.Sprintf("node%d", i), ns: nstest.NewNS(t, fmt.Sprintf("ovl-n%d", i)),
		ip:      netip.MustParseAddr(fmt.Sprintf("192.168.77.%d", 10+i)),
		dataDir: t.TempDir(), cacheDir: t.TempDir(),
	}
	nd.subnetFile = filepath.Join(t.TempDir(), "flannel", "subnet.env")
	nd.logPath = filepath.Join(t.TempDir(), "agent.log")
	nd.cni = libcni.NewCNIConfigWithCacheDir([]string{c.binDir}, nd.cacheDir, nil)
	h := openH(t, nd.ns)
	_, _, err := ul.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("ul-n%d", i), PeerName: "eth0", Peer: h, Master: "br0"})
	must(t, err)
	must(t, h.EnsureAddr("eth0", netip.PrefixFrom(nd.ip, 24), netops.AddrOpts{NoDAD: true}))
	c.nodes = append(c.nodes, nd)
	return nd
}

// startIn starts cmd with its process in the network namespace ns: the
// fork happens on a thread locked into that namespace (the thread is
// discarded afterwards).
func startIn(t *testing.T, ns string, cmd *exec.Cmd) error {
	return nstest.Run(t, ns, cmd.Start)
}

// startEtcd runs etcd on the underlay (in its namespace) and makes it the
// cluster's lease store.
func (c *cluster) startEtcd() {
	t := c.t
	bin := nstest.RequireProgram(t, "etcd", "etcd-server")
	dir := t.TempDir()
	url := "http://" + etcdAddr + ":2379"
	cmd := exec.Command(bin, "--data-dir", dir, "--name", "ovl",
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", "http://"+etcdAddr+":2380",
		"--initial-advertise-peer-urls", "http://"+etcdAddr+":2380",
		"--initial-cluster", "ovl=http://"+etcdAddr+":2380")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := startIn(t, c.underlay, cmd); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	c.etcd = cli
	c.leaseSource = c.etcdLeases
	deadline := time.Now().Add(waitFor)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("etcd exited:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) put(key, val string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.etcd.Put(ctx, key, val); err != nil {
		c.t.Fatal(err)
	}
}

// leases returns the leases of the backend by subnet.
func (c *cluster) leases() map[netip.Prefix]lease.Lease { return c.leaseSource() }

// etcdLeases returns the leases in etcd by subnet.
func (c *cluster) etcdLeases() map[netip.Prefix]lease.Lease {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.etcd.Get(ctx, etcdPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[netip.Prefix]lease.Lease{}
	for _, kv := range resp.Kvs {
		sn, _, ok := lease.ParseSubnetKey(string(kv.Key))
		if !ok {
			c.t.Fatalf("bad lease key %s", kv.Key)
		}
		l := lease.Lease{Subnet: sn}
		if err := json.Unmarshal(kv.Value, &l.Attrs); err != nil {
			c.t.Fatalf("lease %s: %v: %s", kv.Key, err, kv.Value)
		}
		out[sn] = l
	}
	return out
}

// startAgent runs cnibox-agent in the node's namespace.
func (n *node) startAgent(extra ...string) {
	t := n.c.t
	t.Helper()
	backend := []string{"--etcd-endpoints", "http://" + etcdAddr + ":2379"}
	if n.c.agentArgs != nil {
		backend = n.c.agentArgs(n)
	}
	args := append(append(backend,
		"--iface", "eth0",
		"--subnet-file", n.subnetFile,
		"--data-dir", n.dataDir,
		"--ip-masq",
		"--log-level", "debug",
	), extra...)
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	n.runs++
	fmt.Fprintf(f, "----- run %d: %v\n", n.runs, args)
	cmd := exec.Command(n.c.agentBin, args...)
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = f, f
	if n.env != nil {
		cmd.Env = append(os.Environ(), n.env...)
	}
	if err := startIn(t, n.ns, cmd); err != nil {
		f.Close()
		t.Fatalf("start agent on %s: %v", n.name, err)
	}
	n.agent, n.agentDone = cmd, make(chan error, 1)
	go func() { n.agentDone <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() { n.stopAgent() })
}

// stopAgent ends the agent with SIGTERM (as a service manager does) and
// waits for it.
func (n *node) stopAgent() {
	if n.agent == nil {
		return
	}
	n.agent.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.agentDone:
		if err != nil {
			n.c.t.Errorf("agent on %s exited with %v after SIGTERM; log:\n%s", n.name, err, n.log())
		}
	case <-time.After(10 * time.Second):
		n.agent.Process.Kill()
		<-n.agentDone
		n.c.t.Errorf("agent on %s did not stop on SIGTERM", n.name)
	}
	n.agent = nil
}

// cli runs `cnibox ARGS --data-dir <node's>` in the node's namespace and
// decodes its JSON output into v.
func (n *node) cli(v any, args ...string) {
	t := n.c.t
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(n.c.cniboxBin, append(args, "--json", "--data-dir", n.dataDir)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := startIn(t, n.ns, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cnibox %v on %s: %v\n%s", args, n.name, err, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		t.Fatalf("cnibox %v on %s: %v\n%s", args, n.name, err, out.String())
	}
}

// netDump is each namespace's links with their addresses, neighbours (one
// without lladdr is incomplete or failed) and VXLAN FDB, and its routes, for
// the message of a failed reachability check.
func netDump(nss ...string) string {
	var b strings.Builder
	for _, ns := range nss {
		fmt.Fprintf(&b, "--- %s\n", ns)
		h, err := netops.Open(ns)
		if err != nil {
			fmt.Fprintf(&b, "%v\n", err)
			continue
		}
		links, _ := h.Links()
		for _, l := range links {
			addrs, _ := h.Addrs(l.Name)
			fmt.Fprintf(&b, "link %s (%s) up=%v mac=%s mtu=%d addrs=%v\n", l.Name, l.Kind, l.Up, l.MAC, l.MTU, addrs)
			neighs, _ := h.Neighs(l.Name)
			for _, n := range neighs {
				fmt.Fprintf(&b, "  neigh %s\n", n)
			}
			if l.Kind == "vxlan" {
				fdb, _ := h.FDB(l.Name)
				for _, e := range fdb {
					fmt.Fprintf(&b, "  fdb %s\n", e)
				}
			}
		}
		routes, _ := h.Routes("")
		for _, r := range routes {
			fmt.Fprintf(&b, "route %s\n", r)
		}
		h.Close()
	}
	return b.String()
}

func (n *node) log() string {
	b, _ := os.ReadFile(n.logPath)
	return string(b)
}

// state returns what the agent mirrored into the node's store.
func (n *node) state() (store.OverlayState, bool) { return n.stateOf(device) }

// kernel is what is programmed on a node's VXLAN device.
type kernel struct {
	mac    net.HardwareAddr
	routes map[netip.Prefix]netops.Route
	neighs map[netip.Addr]netops.Neigh
	fdb    []netops.FDBEntry
}

func (n *node) kernel() (kernel, error) {
	h, err := netops.Open(n.ns)
	if err != nil {
		return kernel{}, err
	}
	defer h.Close()
	v, err := h.VXLANByName(device)
	if err != nil {
		return kernel{}, err
	}
	k := kernel{mac: v.MAC, routes: map[netip.Prefix]netops.Route{}, neighs: map[netip.Addr]netops.Neigh{}}
	routes, err := h.Routes(device)
	if err != nil {
		return kernel{}, err
	}
	for _, r := range routes {
		if r.Dst.Addr().Is4() {
			k.routes[r.Dst] = r
		}
	}
	neighs, err := h.Neighs(device)
	if err != nil {
		return kernel{}, err
	}
	for _, nb := range neighs {
		if nb.IP.Is4() {
			k.neighs[nb.IP] = nb
		}
	}
	k.fdb, err = h.FDB(device)
	return k, err
}

// mismatch says how the node's kernel differs from programming exactly the
// peers (every lease but its own); "" when it matches.
func (n *node) mismatch(peers map[netip.Prefix]lease.Lease) string {
	k, err := n.kernel()
	if err != nil {
		return err.Error()
	}
	var diffs []string
	own, _ := n.state()
	want := 0
	for sn, l := range peers {
		if sn == own.Lease.Subnet {
			continue
		}
		want++
		gw := sn.Addr()
		if r, ok := k.routes[sn]; !ok || r.GW != gw || !r.Onlink {
			diffs = append(diffs, fmt.Sprintf("route %s via %s onlink: have %v", sn, gw, r))
		}
		if nb, ok := k.neighs[gw]; !ok || nb.MAC.String() != l.Attrs.VTEPMAC.String() || !nb.Permanent {
			diffs = append(diffs, fmt.Sprintf("neighbour %s lladdr %s permanent: have %v", gw, l.Attrs.VTEPMAC, nb))
		}
		found := false
		for _, e := range k.fdb {
			found = found || (e.MAC.String() == l.Attrs.VTEPMAC.String() && e.Dst == l.Attrs.PublicIP && e.Permanent)
		}
		if !found {
			diffs = append(diffs, fmt.Sprintf("fdb %s dst %s permanent: have %v", l.Attrs.VTEPMAC, l.Attrs.PublicIP, k.fdb))
		}
	}
	if len(k.routes) != want || len(k.neighs) != want || len(k.fdb) != want {
		diffs = append(diffs, fmt.Sprintf("want exactly %d peers; have routes %v, neighbours %v, fdb %v", want, k.routes, k.neighs, k.fdb))
	}
	return strings.Join(diffs, "; ")
}

// converge waits until every node in nodes programs exactly the leases in
// etcd, and every agent's store says ready.
func (c *cluster) converge(nodes ...*node) {
	c.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		leases := c.leases()
		var bad []string
		for _, n := range nodes {
			s, ok := n.state()
			if !ok || !s.Ready {
				bad = append(bad, n.name+": agent not ready")
				continue
			}
			if len(s.Peers) != len(leases)-1 {
				bad = append(bad, fmt.Sprintf("%s: the store lists %d peers, etcd has %d other leases", n.name, len(s.Peers), len(leases)-1))
			}
			if m := n.mismatch(leases); m != "" {
				bad = append(bad, n.name+": "+m)
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, n := range nodes {
				c.t.Logf("agent log of %s:\n%s", n.name, n.log())
			}
			c.t.Fatalf("the overlay did not converge (%d leases in etcd):\n%s", len(leases), strings.Join(bad, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pod is a container on a node.
type pod struct {
	node *node
	id   string
	ns   string
	ip   netip.Addr // IPv4
	ip6  netip.Addr // IPv6, when the network has it
	rt   *libcni.RuntimeConf
}

var podSeq int

// conflist is the node's vxlan network as a runtime loads it.
func (n *node) conflist() *libcni.NetworkConfigList {
	conf := `{
		"cniVersion": "1.1.0", "name": "overlay",
		"plugins": [{"type": "vxlan"}]
	}`
	if n.c.netConf != nil {
		conf = n.c.netConf(n)
	}
	l, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		n.c.t.Fatal(err)
	}
	return l
}

// onNode runs fn (a libcni call) with the plugin processes started inside
// the node's namespace and using the node's store.
func (n *node) onNode(fn func() error) error {
	envMu.Lock()
	defer envMu.Unlock()
	old, had := os.LookupEnv(store.EnvDataDir)
	os.Setenv(store.EnvDataDir, n.dataDir)
	defer func() {
		if had {
			os.Setenv(store.EnvDataDir, old)
		} else {
			os.Unsetenv(store.EnvDataDir)
		}
	}()
	return nstest.Run(n.c.t, n.ns, fn)
}

// envMu serialises the changes of CNIBOX_DATA_DIR that onNode makes.
var envMu sync.Mutex

func (n *node) addPod(name string) (*pod, error) {
	podSeq++
	p := &pod{node: n, id: fmt.Sprintf("%s-%s-%d", n.name, name, podSeq), ns: nstest.NewNS(n.c.t, "ovl-p")}
	p.rt = &libcni.RuntimeConf{ContainerID: p.id, NetNS: p.ns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}}}
	var res *current.Result
	err := n.onNode(func() error {
		r, err := n.cni.AddNetworkList(context.Background(), n.conflist(), p.rt)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, ipc := range res.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok && a.Unmap().Is4() {
			p.ip = a.Unmap()
		} else if ok {
			p.ip6 = a
		}
	}
	if !p.ip.IsValid() && !(n.c.v6Only && p.ip6.IsValid()) {
		return nil, fmt.Errorf("ADD result has no IPv4 address: %v", res)
	}
	return p, nil
}

func (n *node) delPod(p *pod) error {
	return n.onNode(func() error {
		return n.cni.DelNetworkList(context.Background(), n.conflist(), p.rt)
	})
}

func (n *node) status() error {
	return n.onNode(func() error {
		return n.cni.GetStatusNetworkList(context.Background(), n.conflist())
	})
}

// reachable reports whether a TCP connection from pod "from" reaches a
// listener at the IPv4 address of pod "to" (nstest.Reachable).
func reachable(t *testing.T, from, to *pod) error {
	t.Helper()
	if err := nstest.Reachable(t, from.ns, to.ns, to.ip); err != nil {
		return fmt.Errorf("%s -> %s: %w", from.id, to.id, err)
	}
	return nil
}

func openH(t *testing.T, ns string) *netops.Handle {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
