package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
)

// The agent's node is this private namespace: its underlay is ul0 (a veth
// whose peer is ul1), 10.77.0.1/16; the simulated peers' public IPs are the
// rest of 10.77.0.0/16 (an FDB entry's destination need not answer).
const (
	device   = "flannel.1"
	underlay = "ul0"
)

var (
	nodeIP     = netip.MustParseAddr("10.77.0.1")
	clusterNet = netip.MustParsePrefix("10.0.0.0/8")
)

// peer is one simulated node: its subnet, VTEP MAC and public IP.
type peer struct {
	index  int
	name   string
	subnet netip.Prefix
	mac    net.HardwareAddr
	ip     netip.Addr
}

// peers returns n simulated nodes: subnets 10.1.0.0/24 upwards (out of the
// agent's way: it leases or is given 10.0.x.0/24).
func peers(n int) []peer {
	out := make([]peer, n)
	for i := range out {
		j := i + 256
		out[i] = peer{
			index:  i,
			name:   fmt.Sprintf("sim-%05d", i),
			subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(j >> 8), byte(j), 0}), 24),
			mac:    net.HardwareAddr{0x0a, 0x58, 0x0a, byte(i >> 16), byte(i >> 8), byte(i)},
			ip:     netip.AddrFrom4([4]byte{10, 77, byte(1 + i/250), byte(1 + i%250)}),
		}
	}
	return out
}

// underlayUp makes ul0 with the node's address (idempotent).
func underlayUp() error {
	h, err := netops.Open("")
	if err != nil {
		return err
	}
	defer h.Close()
	if _, _, err := h.EnsureVeth(netops.VethOpts{HostName: underlay, PeerName: "ul1", Peer: h}); err != nil {
		return err
	}
	return h.EnsureAddr(underlay, netip.PrefixFrom(nodeIP, 16), netops.AddrOpts{NoDAD: true})
}

// agent is the one real agent and what the kernel of its namespace says.
type agent struct {
	o    *options
	dir  string
	proc *benchnode.Proc
	h    *netops.Handle
	stop context.CancelFunc

	typ string // overlay backend type

	want    int
	routes  *benchnode.PeerRoutes // complete at want
	anonKiB int                   // RssAnon at the last usage(): the agent's own, not the binary's pages
}

// newAgent watches the namespace's routes; start runs the binary.
func newAgent(o *options, dir string, want int, typ string) (*agent, error) {
	if err := underlayUp(); err != nil {
		return nil, err
	}
	h, err := netops.Open("")
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	a := &agent{o: o, dir: dir, h: h, stop: stop, want: want, typ: typ}
	if a.routes, err = benchnode.WatchPeerRoutes(ctx, h, clusterNet, want); err != nil {
		stop()
		h.Close()
		return nil, err
	}
	return a, nil
}

// start runs bin with the backend's flags; it returns the start time.
func (a *agent) start(bin string, args ...string) (time.Time, error) {
	args = append([]string{"--iface", underlay, "--subnet-file", filepath.Join(a.dir, "subnet.env")}, args...)
	if !strings.Contains(filepath.Base(bin), "flanneld") { // flanneld has no store
		args = append(args, "--data-dir", filepath.Join(a.dir, "data"))
	}
	t0 := time.Now()
	p, err := benchnode.Start(benchnode.StartOpts{Bin: bin, Args: args, Log: filepath.Join(a.dir, "agent.log")})
	if err != nil {
		return t0, err
	}
	a.proc = p
	return t0, nil
}

// converged waits for the kernel to hold the want-th peer route and returns
// when it did.
func (a *agent) converged(timeout time.Duration) (time.Time, error) {
	if a.typ == typeWireGuard {
		return a.wgConverged(timeout)
	}
	deadline := time.Now().Add(timeout)
	for {
		t, n := a.routes.Complete()
		if !t.IsZero() || a.want == 0 {
			return t, nil
		}
		if ended, err := a.proc.Exited(); ended {
			return t, fmt.Errorf("the agent exited (%v) with %d of %d routes:\n%s", err, n, a.want, a.logTail())
		}
		if time.Now().After(deadline) {
			return t, fmt.Errorf("%d of %d peer routes after %s:\n%s", n, a.want, timeout, a.logTail())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// removed waits for the route to sn to go and returns when it went.
func (a *agent) removed(sn netip.Prefix, timeout time.Duration) (time.Time, error) {
	if a.typ == typeWireGuard {
		return a.wgRemoved(sn, timeout)
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if t, ok := a.routes.Deleted(sn); ok {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("the route to %s is still there after %s", sn, timeout)
}

// mismatches counts the peers whose route, neighbour or FDB entry is
// missing or wrong, plus one for each entry that belongs to no peer.
func (a *agent) mismatches(ps []peer) (int, error) {
	switch a.typ {
	case typeHostGW:
		return a.hostGWMismatches(ps)
	case typeWireGuard:
		return a.wgMismatches(ps)
	}
	routes, err := a.h.Routes(device)
	if err != nil {
		return 0, err
	}
	neighs, err := a.h.Neighs(device)
	if err != nil {
		return 0, err
	}
	fdb, err := a.h.FDB(device)
	if err != nil {
		return 0, err
	}
	rs, ns, fs := map[netip.Prefix]netops.Route{}, map[netip.Addr]netops.Neigh{}, map[string]netops.FDBEntry{}
	for _, r := range routes {
		if r.Dst.Addr().Is4() {
			rs[r.Dst] = r
		}
	}
	for _, n := range neighs {
		if n.IP.Is4() {
			ns[n.IP] = n
		}
	}
	for _, f := range fdb {
		fs[f.MAC.String()] = f
	}
	bad := 0
	for _, p := range ps {
		gw := p.subnet.Addr()
		r, okR := rs[p.subnet]
		n, okN := ns[gw]
		f, okF := fs[p.mac.String()]
		if !okR || r.GW != gw || !r.Onlink || !okN || n.MAC.String() != p.mac.String() || !n.Permanent ||
			!okF || f.Dst != p.ip || !f.Permanent {
			bad++
		}
	}
	for _, extra := range []int{len(rs), len(ns), len(fdb)} {
		if extra > len(ps) {
			bad += extra - len(ps)
		}
	}
	return bad, nil
}

// usage is the agent's resident set and its peak (KiB) and the CPU its
// threads have used.
func (a *agent) usage() (rss, hwm int, cpu time.Duration) {
	m := benchnode.ReadMem(a.proc.Pid())
	a.anonKiB = m.Anon
	return m.RSS, m.HWM, benchnode.ThreadCPU(a.proc.Pid())
}

func (a *agent) logTail() string { return a.proc.LogTail(3000) }

// close stops the agent and removes what it made.
func (a *agent) close() {
	a.proc.Stop()
	a.stop()
	a.h.DeleteLink(device)
	a.h.DeleteLink(wgDevice)
	a.cleanRoutes()
	a.h.Close()
}

// heapProfile saves the agent's heap profile (benchnode.SaveHeap).
func heapProfile(name string) { benchnode.SaveHeap("bench-scale", "", name) }
