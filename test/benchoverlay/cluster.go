package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
)

const (
	etcdAddr   = "10.77.0.1"
	etcdURL    = "http://" + etcdAddr + ":2379"
	etcdPrefix = "/coreos.com/network"
	device     = "flannel.1"
	bridge     = "obr0"
)

var clusterNet = netip.MustParsePrefix("10.244.0.0/16")

// cluster is the underlay bridge (in the private namespace), etcd on it and
// the node namespaces.
type cluster struct {
	o     *options
	dir   string
	h     *netops.Handle
	etcd  *clientv3.Client
	ecmd  *exec.Cmd
	edone chan struct{}
	nodes []*node
	ctx   context.Context
	stop  context.CancelFunc
}

// node is one simulated machine: its namespace (benchnode.NS), its agent
// and the peer routes its kernel holds.
type node struct {
	*benchnode.NS
	c          *cluster
	i          int
	ns         string // the namespace's path
	ip         netip.Addr
	h          *netops.Handle
	dataDir    string
	subnetFile string
	logPath    string
	agent      *benchnode.Proc
	routes     *benchnode.PeerRoutes // complete at the peers expected (SetWant)
}

func (c *cluster) logf(format string, args ...any) {
	if c.o.verbose {
		fmt.Fprintf(os.Stderr, "bench-overlay: "+format+"\n", args...)
	}
}

// newCluster builds the underlay with n node namespaces and starts etcd
// with the network configuration conf.
func newCluster(o *options, n int, conf string) (*cluster, error) {
	dir, err := os.MkdirTemp("", "cnibox-bench-overlay-")
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &cluster{o: o, dir: dir, ctx: ctx, stop: stop}
	if c.h, err = netops.Open(""); err != nil {
		return c, err
	}
	if _, err := c.h.EnsureBridge(netops.BridgeOpts{Name: bridge}); err != nil {
		return c, err
	}
	if err := c.h.EnsureAddr(bridge, netip.MustParsePrefix(etcdAddr+"/16"), netops.AddrOpts{NoDAD: true}); err != nil {
		return c, err
	}
	for i := 1; i <= n; i++ {
		if err := c.addNode(i); err != nil {
			return c, fmt.Errorf("node %d: %w", i, err)
		}
	}
	c.logf("%d node namespaces ready", n)
	if err := c.startEtcd(); err != nil {
		return c, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.etcd.Put(cctx, etcdPrefix+"/config", conf); err != nil {
		return c, err
	}
	return c, nil
}

func (c *cluster) addNode(i int) error {
	nd := &node{
		c: c, i: i,
		ip:      netip.AddrFrom4([4]byte{10, 77, 1, byte(i)}),
		dataDir: filepath.Join(c.dir, fmt.Sprintf("n%d", i)),
	}
	nd.subnetFile = filepath.Join(nd.dataDir, "subnet.env")
	nd.logPath = filepath.Join(nd.dataDir, "agent.log")
	if err := os.MkdirAll(nd.dataDir, 0o700); err != nil {
		return err
	}
	ns, err := benchnode.NewNS(fmt.Sprintf("cbxo-%d-%d", os.Getpid(), i), benchnode.Wire{
		Host: c.h, HostVeth: fmt.Sprintf("obn%d", i), Bridge: bridge, Addr: netip.PrefixFrom(nd.ip, 16),
	})
	if ns != nil {
		nd.NS, nd.ns, nd.h = ns, ns.Path, ns.H
		c.nodes = append(c.nodes, nd)
	}
	if err != nil {
		return err
	}
	nd.routes, err = benchnode.WatchPeerRoutes(c.ctx, nd.h, clusterNet, 0)
	return err
}

// runIn runs fn on a thread inside the namespace at ns.
func runIn(ns string, fn func() error) error {
	return netops.InNetns(ns, fn)
}

func (c *cluster) startEtcd() error {
	data := filepath.Join(c.dir, "etcd")
	c.ecmd = exec.Command("etcd", "--data-dir", data, "--name", "b",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://"+etcdAddr+":2380", "--initial-advertise-peer-urls", "http://"+etcdAddr+":2380",
		"--initial-cluster", "b=http://"+etcdAddr+":2380")
	log, err := os.Create(filepath.Join(c.dir, "etcd.log"))
	if err != nil {
		return err
	}
	c.ecmd.Stdout, c.ecmd.Stderr = log, log
	if err := c.ecmd.Start(); err != nil {
		return err
	}
	c.edone = make(chan struct{})
	go func() { c.ecmd.Wait(); log.Close(); close(c.edone) }()
	if c.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(c.ctx, time.Second)
		_, err := c.etcd.Get(ctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd did not start: %v (log %s)", err, filepath.Join(c.dir, "etcd.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startAgent runs cnibox-agent in the node's namespace.
func (n *node) startAgent(extra ...string) error {
	args := append([]string{
		"--etcd-endpoints", etcdURL, "--iface", "eth0",
		"--subnet-file", n.subnetFile, "--data-dir", n.dataDir, "--ip-masq", "--log-level", "info",
	}, extra...)
	a, err := benchnode.Start(benchnode.StartOpts{Bin: n.c.o.agent, Args: args, Log: n.logPath, Append: true, NS: n.ns})
	if err != nil {
		return err
	}
	n.agent = a
	return nil
}

// exited reports whether the agent has ended.
func (n *node) exited() bool {
	if n.agent == nil {
		return false
	}
	ended, _ := n.agent.Exited()
	return ended
}

// stopAgent ends the agent with SIGTERM and waits for it.
func (n *node) stopAgent() {
	n.agent.Stop()
	n.agent = nil
}

// leases returns the leases in etcd.
func (c *cluster) leases() (map[netip.Prefix]lease.Lease, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	resp, err := c.etcd.Get(ctx, etcdPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[netip.Prefix]lease.Lease{}
	for _, kv := range resp.Kvs {
		sn, _, ok := lease.ParseSubnetKey(string(kv.Key))
		if !ok {
			continue
		}
		l := lease.Lease{Subnet: sn}
		if err := json.Unmarshal(kv.Value, &l.Attrs); err != nil {
			return nil, err
		}
		out[sn] = l
	}
	return out, nil
}

// mismatches counts the peers whose route, neighbour or FDB entry on the
// node differ from the leases, plus entries that belong to no peer.
func (n *node) mismatches(leases map[netip.Prefix]lease.Lease) int {
	routes, err1 := n.h.Routes(device)
	neighs, err2 := n.h.Neighs(device)
	fdb, err3 := n.h.FDB(device)
	if err1 != nil || err2 != nil || err3 != nil {
		return len(leases)
	}
	bad, want := 0, 0
	for sn, l := range leases {
		if l.Attrs.PublicIP == n.ip {
			continue
		}
		want++
		gw, mac := sn.Addr(), l.Attrs.VTEPMAC.String()
		okR, okN, okF := false, false, false
		for _, r := range routes {
			okR = okR || (r.Dst == sn && r.GW == gw && r.Onlink)
		}
		for _, nb := range neighs {
			okN = okN || (nb.IP == gw && nb.MAC.String() == mac && nb.Permanent)
		}
		for _, e := range fdb {
			okF = okF || (e.MAC.String() == mac && e.Dst == l.Attrs.PublicIP && e.Permanent)
		}
		if !okR || !okN || !okF {
			bad++
		}
	}
	v4 := 0
	for _, r := range routes {
		if r.Dst.Addr().Is4() {
			v4++
		}
	}
	n4 := 0
	for _, nb := range neighs {
		if nb.IP.Is4() {
			n4++
		}
	}
	if v4 != want || n4 != want || len(fdb) != want {
		bad++
	}
	return bad
}

// lostRaces counts the lease collisions the agent logged.
func (n *node) lostRaces() int {
	b, _ := os.ReadFile(n.logPath)
	return bytes.Count(b, []byte("lost the race"))
}

// usage returns the agent's resident set (now and peak) in KiB and its CPU
// time so far.
func (n *node) usage() (rss, hwm int, cpu time.Duration) {
	rss, hwm, _, _, _, cpu = n.usageDetail()
	return rss, hwm, cpu
}

// usageDetail is usage with the resident set split into anonymous memory
// (the agent's own) and file pages (the binary, shared by every agent), and
// the proportional set size (shared pages divided among their users).
func (n *node) usageDetail() (rss, hwm, anon, file, pss int, cpu time.Duration) {
	if n.agent == nil {
		return 0, 0, 0, 0, 0, 0
	}
	pid := n.agent.Pid()
	m := benchnode.ReadMem(pid)
	return m.RSS, m.HWM, m.Anon, m.File, benchnode.PSS(pid), benchnode.StatCPU(pid)
}

// close stops everything and removes the namespaces.
func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.stopAgent() }()
	}
	wg.Wait()
	c.stop()
	if c.etcd != nil {
		c.etcd.Close()
	}
	if c.ecmd != nil && c.ecmd.Process != nil {
		c.ecmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.edone:
		case <-time.After(10 * time.Second):
			c.ecmd.Process.Kill()
			<-c.edone
		}
	}
	for _, n := range c.nodes {
		n.NS.Close()
	}
	if c.h != nil {
		for _, n := range c.nodes {
			c.h.DeleteLink(fmt.Sprintf("obn%d", n.i))
		}
		c.h.DeleteLink(bridge)
		c.h.Close()
	}
	os.RemoveAll(c.dir)
}
