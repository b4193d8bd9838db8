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
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
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

// node is one simulated machine.
type node struct {
	c          *cluster
	i          int
	nsName     string
	ns         string
	ip         netip.Addr
	h          *netops.Handle
	dataDir    string
	subnetFile string
	logPath    string
	cmd        *exec.Cmd
	done       chan error

	mu       sync.Mutex
	want     int // peers expected
	peers    map[netip.Prefix]bool
	complete time.Time // when the want-th peer route appeared
	deleted  map[netip.Prefix]time.Time
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
		c: c, i: i, nsName: fmt.Sprintf("cbxo-%d-%d", os.Getpid(), i),
		ip:      netip.AddrFrom4([4]byte{10, 77, 1, byte(i)}),
		dataDir: filepath.Join(c.dir, fmt.Sprintf("n%d", i)),
		peers:   map[netip.Prefix]bool{}, deleted: map[netip.Prefix]time.Time{},
	}
	nd.subnetFile = filepath.Join(nd.dataDir, "subnet.env")
	nd.logPath = filepath.Join(nd.dataDir, "agent.log")
	if err := os.MkdirAll(nd.dataDir, 0o700); err != nil {
		return err
	}
	var err error
	if nd.ns, err = netops.CreateNamedNS(nd.nsName); err != nil {
		return err
	}
	c.nodes = append(c.nodes, nd)
	if nd.h, err = netops.Open(nd.ns); err != nil {
		return err
	}
	if err := nd.h.SetLinkUp("lo"); err != nil {
		return err
	}
	if _, _, err := c.h.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("obn%d", i), PeerName: "eth0", Peer: nd.h, Master: bridge}); err != nil {
		return err
	}
	if err := nd.h.EnsureAddr("eth0", netip.PrefixFrom(nd.ip, 16), netops.AddrOpts{NoDAD: true}); err != nil {
		return err
	}
	return nd.watchRoutes(c.ctx)
}

// watchRoutes tracks the peer routes of the node as the kernel reports them.
func (n *node) watchRoutes(ctx context.Context) error {
	events, err := n.h.WatchRoutes(ctx, nil)
	if err != nil {
		return err
	}
	go func() {
		for ev := range events {
			if !clusterNet.Contains(ev.Dst.Addr()) || ev.Dst.Bits() <= clusterNet.Bits() {
				continue
			}
			n.mu.Lock()
			if ev.Deleted {
				delete(n.peers, ev.Dst)
				n.deleted[ev.Dst] = ev.Time
			} else {
				n.peers[ev.Dst] = true
				if n.want > 0 && len(n.peers) >= n.want && n.complete.IsZero() {
					n.complete = ev.Time
				}
			}
			n.mu.Unlock()
		}
	}()
	return nil
}

// startIn starts cmd with its process in the network namespace at ns: the
// fork happens on a thread locked into that namespace, and the thread is
// discarded afterwards.
func startIn(ns string, cmd *exec.Cmd) error {
	return runIn(ns, cmd.Start)
}

// runIn runs fn on a thread inside the namespace at ns (never reused).
func runIn(ns string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(ns)
		if err != nil {
			done <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			done <- fmt.Errorf("enter %s: %w", ns, err)
			return
		}
		done <- fn()
	}()
	return <-done
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
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.cmd = exec.Command(n.c.o.agent, args...)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := startIn(n.ns, n.cmd); err != nil {
		f.Close()
		return err
	}
	n.done = make(chan error, 1)
	cmd := n.cmd
	go func() { n.done <- cmd.Wait(); f.Close() }()
	return nil
}

// exited reports whether the agent has ended.
func (n *node) exited() bool {
	if n.cmd == nil || n.cmd.ProcessState != nil {
		return n.cmd != nil
	}
	select {
	case err := <-n.done:
		n.done <- err
		return true
	default:
		return false
	}
}

// stopAgent ends the agent with SIGTERM and waits for it.
func (n *node) stopAgent() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
	}
	n.cmd = nil
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
	if n.cmd == nil || n.cmd.Process == nil {
		return 0, 0, 0, 0, 0, 0
	}
	pid := n.cmd.Process.Pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "VmRSS:" {
				fmt.Sscan(f[1], &rss)
			}
			if len(f) >= 2 && f[0] == "VmHWM:" {
				fmt.Sscan(f[1], &hwm)
			}
			if len(f) >= 2 && f[0] == "RssAnon:" {
				fmt.Sscan(f[1], &anon)
			}
			if len(f) >= 2 && f[0] == "RssFile:" {
				fmt.Sscan(f[1], &file)
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				fmt.Sscan(f[1], &pss)
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 13 {
				var ut, st int64
				fmt.Sscan(f[11], &ut)
				fmt.Sscan(f[12], &st)
				cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ
			}
		}
	}
	return rss, hwm, anon, file, pss, cpu
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
		if n.h != nil {
			n.h.Close()
		}
		netops.DeleteNamedNS(n.nsName)
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
