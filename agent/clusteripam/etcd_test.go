package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/internal/wbpool"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The allocator against a real etcd (Debian's etcd-server) on the test's
// private loopback: several agents ("nodes") share the pools the way
// agents on podman hosts do, and the same code runs on the Kubernetes
// backend (test/kube).

func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

// etcdBackend starts etcd and returns a backend on a fresh prefix.
func etcdBackend(t *testing.T) *Etcd {
	t.Helper()
	bin := nstest.RequireProgram(t, "etcd", "etcd-server")
	if !testenv.Root() {
		t.Skip("needs root for a private network namespace")
	}
	const url, peer = "http://127.0.0.1:24790", "http://127.0.0.1:24791"
	cmd := exec.Command(bin, "--data-dir", t.TempDir(), "--name", "t", "--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:24790", time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not start: %v", err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &Etcd{Client: cli, Prefix: "/test/" + t.Name()}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func req(cid, pod string, ranges ...string) *agentapi.IPAMRequest {
	r := &agentapi.IPAMRequest{ContainerID: cid, IfName: "net1", PodRef: pod, Network: "lan"}
	for _, s := range ranges {
		r.Ranges = append(r.Ranges, agentapi.IPAMRange{Range: s})
	}
	return r
}

// allocations returns address -> podref of the pool.
func allocations(t *testing.T, b Backend, name string) map[netip.Addr]string {
	t.Helper()
	p, err := b.GetPool(context.Background(), name, true)
	if err != nil {
		t.Fatal(err)
	}
	base, _, _ := wbpool.ParsePoolRange(p.Range)
	out := map[netip.Addr]string{}
	for off, a := range p.Allocations {
		ip, ok := wbpool.AddrAt(base, off)
		if !ok {
			t.Fatalf("bad offset %q", off)
		}
		out[ip] = a.PodRef
	}
	return out
}

// Three agents add 240 attachments at once into one /24 (and an
// overlapping-range reservation each): every address once, the lowest
// ones, as whereabouts hands them out; the pool's keys are offsets from
// the range; DEL frees them all (twice is fine).
func TestConcurrentAgents(t *testing.T) {
	b := etcdBackend(t)
	ctx := ctxT(t)
	lg := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	nodes := []*Allocator{{B: b, Node: "n1", Log: lg}, {B: b, Node: "n2", Log: lg}, {B: b, Node: "n3", Log: lg}}
	const n = 240
	attachment := func(i int) *agentapi.IPAMRequest {
		r := req(fmt.Sprintf("c%d", i), fmt.Sprintf("ns/p%d", i), "10.10.0.0/24")
		r.Overlapping = true
		return r
	}
	got := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := attachment(i)
			ips, err := nodes[i%3].Add(ctx, r)
			if err != nil {
				errs <- err
				return
			}
			got[i] = ips[0]
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, ip := range got {
		if j, dup := seen[ip]; dup {
			t.Fatalf("%s handed out twice (attachments %d and %d)", ip, j, i)
		}
		seen[ip] = i
	}
	all := allocations(t, b, "10.10.0.0-24")
	if len(all) != n {
		t.Fatalf("pool has %d allocations, want %d", len(all), n)
	}
	for i := 1; i <= n; i++ {
		if _, ok := all[netip.AddrFrom4([4]byte{10, 10, 0, byte(i)})]; !ok {
			t.Fatalf("10.10.0.%d is free while %d addresses are handed out: not the lowest ones", i, n)
		}
	}
	p, _ := b.GetPool(ctx, "10.10.0.0-24", true)
	if p.Range != "10.10.0.0/24" || p.Allocations["1"].ContainerID == "" {
		t.Errorf("pool %s range %q, offset 1 = %+v", p.Name, p.Range, p.Allocations["1"])
	}
	if r, err := b.GetReservation(ctx, "10.10.0.1"); err != nil || r.PodRef == "" {
		t.Errorf("OverlappingRangeIPReservation 10.10.0.1: %+v, %v", r, err)
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := attachment(i)
			for k := 0; k < 2; k++ {
				if err := nodes[(i+1)%3].Del(ctx, r); err != nil {
					t.Error(err)
				}
			}
		}(i)
	}
	wg.Wait()
	if left := allocations(t, b, "10.10.0.0-24"); len(left) != 0 {
		t.Errorf("after DEL the pool holds %v", left)
	}
	if _, err := b.GetReservation(ctx, "10.10.0.1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the reservation of 10.10.0.1 survived DEL: %v", err)
	}
}

// The same pod and interface gets its address again (whereabouts updates
// the container ID); an address asked for is reserved or refused; a full
// range is error Exhausted and a dual-range ADD that fails keeps nothing.
func TestAllocatorSemantics(t *testing.T) {
	b := etcdBackend(t)
	ctx := ctxT(t)
	al := &Allocator{B: b, Node: "n1"}
	ips, err := al.Add(ctx, req("c1", "ns/a", "10.20.0.0/29", "fd00:20::/125"))
	if err != nil || ips[0] != "10.20.0.1/29" || ips[1] != "fd00:20::1/125" {
		t.Fatalf("first ADD %v, %v", ips, err)
	}
	again, err := al.Add(ctx, req("c1-new", "ns/a", "10.20.0.0/29", "fd00:20::/125"))
	if err != nil || again[0] != ips[0] {
		t.Fatalf("same pod again: %v, %v", again, err)
	}
	if p, _ := b.GetPool(ctx, "10.20.0.0-29", true); p.Allocations["1"].ContainerID != "c1-new" {
		t.Errorf("container ID not updated: %+v", p.Allocations)
	}
	r := req("c2", "ns/b", "10.20.0.0/29")
	r.Requested = []string{"10.20.0.5"}
	if ips, err := al.Add(ctx, r); err != nil || ips[0] != "10.20.0.5/29" {
		t.Fatalf("requested: %v, %v", ips, err)
	}
	r = req("c3", "ns/c", "10.20.0.0/29")
	r.Requested = []string{"10.20.0.5"}
	_, err = al.Add(ctx, r)
	var ae *agentapi.Error
	if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonConflict {
		t.Fatalf("requested address held by another pod: %v", err)
	}
	for i := 4; i <= 7; i++ { // 10.20.0.2-4, .6 (the /29 has six)
		if _, err := al.Add(ctx, req(fmt.Sprintf("f%d", i), fmt.Sprintf("ns/f%d", i), "10.20.0.0/29")); err != nil {
			t.Fatal(err)
		}
	}
	_, err = al.Add(ctx, req("x", "ns/x", "fd00:20::/125", "10.20.0.0/29"))
	if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonExhausted {
		t.Fatalf("full range: %v", err)
	}
	if v6 := allocations(t, b, "fd00-20---125"); len(v6) != 1 {
		t.Errorf("the failed dual-range ADD left its IPv6 address: %v", v6)
	}
}

// A released address is remembered for its pod (sticky): new pods get
// other addresses while free ones are left, and the pod that comes back
// gets its own.
func TestSticky(t *testing.T) {
	b := etcdBackend(t)
	ctx := ctxT(t)
	al := &Allocator{B: b}
	mk := func(cid, pod string) *agentapi.IPAMRequest {
		r := req(cid, pod, "10.30.0.0/24")
		r.Sticky = true
		return r
	}
	first, _ := al.Add(ctx, mk("c1", "ns/web-0"))
	if err := al.Del(ctx, mk("c1", "ns/web-0")); err != nil {
		t.Fatal(err)
	}
	other, _ := al.Add(ctx, mk("c2", "ns/other"))
	if other[0] == first[0] {
		t.Errorf("a new pod got %s, remembered for ns/web-0", other[0])
	}
	back, err := al.Add(ctx, mk("c3", "ns/web-0"))
	if err != nil || back[0] != first[0] {
		t.Errorf("ns/web-0 came back with %v (%v), had %s", back, err, first[0])
	}
}

// Node slices: each node leases its own slice of the NodeSlicePool and
// allocates in the pool named after the node, with the whole range's
// prefix length.
func TestNodeSlices(t *testing.T) {
	b := etcdBackend(t)
	ctx := ctxT(t)
	mk := func(cid string) *agentapi.IPAMRequest {
		r := req(cid, "ns/"+cid, "10.40.0.0/24")
		r.NetworkName, r.NodeSliceSize = "blue", "/26"
		return r
	}
	a1, a2 := &Allocator{B: b, Node: "n1"}, &Allocator{B: b, Node: "n2"}
	ip1, err := a1.Add(ctx, mk("c1"))
	if err != nil {
		t.Fatal(err)
	}
	ip2, err := a2.Add(ctx, mk("c2"))
	if err != nil {
		t.Fatal(err)
	}
	if ip1[0] != "10.40.0.1/24" || ip2[0] != "10.40.0.65/24" {
		t.Errorf("slices: n1 %v, n2 %v", ip1, ip2)
	}
	sp, err := b.GetSlicePool(ctx, "blue")
	if err != nil || len(sp.Slices) != 4 || sp.Slices[0].Node != "n1" || sp.Slices[1].Node != "n2" || sp.Slices[2].Node != "" {
		t.Fatalf("NodeSlicePool %+v, %v", sp, err)
	}
	// The slice's pool is written behind: wait for it.
	waitPool(t, b, "blue-n2-10.40.0.64-26", 1)

	// Another writer (the reclaiming agent, here a second allocator)
	// releases c2 in n2's pool while n2 adds more: both changes survive.
	other := &Allocator{B: b}
	if err := other.release(ctx, target{pool: "blue-n2-10.40.0.64-26"}, mk("c2")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := a2.Add(ctx, mk(fmt.Sprintf("d%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	got := waitPool(t, b, "blue-n2-10.40.0.64-26", 5)
	for ip, pod := range got {
		if pod == "ns/c2" {
			t.Errorf("the release of %s by another writer was undone", ip)
		}
	}
	// The runtime's GC keeps d0-d3: d4 goes.
	gcReq := mk("")
	for i := 0; i < 4; i++ {
		gcReq.Keep = append(gcReq.Keep, agentapi.IPAMAttachment{ContainerID: fmt.Sprintf("d%d", i), IfName: "net1"})
	}
	if freed, err := a2.GC(ctx, gcReq); err != nil || len(freed) != 1 {
		t.Fatalf("GC freed %v, %v; want d4's address", freed, err)
	}
	for _, pod := range waitPool(t, b, "blue-n2-10.40.0.64-26", 4) {
		if pod == "ns/d4" {
			t.Error("GC left d4")
		}
	}
}

// waitPool waits until the pool holds n allocations and returns them.
func waitPool(t *testing.T, b Backend, name string, n int) map[netip.Addr]string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p, err := b.GetPool(context.Background(), name, true)
		if err == nil && len(p.Allocations) == n {
			return allocations(t, b, name)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s: %+v, %v; want %d allocations", name, p, err, n)
		}
	}
}

var _ = slog.Default
