package etcdlease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The tests run in a private network namespace, so etcd's loopback ports
// are the test's own.
func TestMain(m *testing.M) {
	nstest.MainInPrivateNetns(m)
}

var etcdOnce struct {
	sync.Mutex
	port int
}

// startEtcd runs a real etcd (Debian's etcd-server) on the private loopback
// for the test and returns its client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin := nstest.RequireProgram(t, "etcd", "etcd-server")
	if !testenv.Root() {
		t.Skip("needs root for a private network namespace")
	}
	etcdOnce.Lock()
	etcdOnce.port += 2
	port := 23790 + etcdOnce.port
	etcdOnce.Unlock()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	peer := fmt.Sprintf("http://127.0.0.1:%d", port+1)
	var log bytes.Buffer
	cmd := exec.Command(bin, "--data-dir", t.TempDir(), "--name", "t",
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
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
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not start: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func newManager(t *testing.T, url string) *Manager {
	t.Helper()
	return newManagerAt(t, url, "")
}

// newManagerAt is a Manager of a TTL of a minute under prefix ("" =
// DefaultPrefix), closed when the test ends.
func newManagerAt(t *testing.T, url, prefix string) *Manager {
	t.Helper()
	m, err := New(Config{Endpoints: []string{url}, Prefix: prefix, TTL: time.Minute, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func client(t *testing.T, url string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func attrs(i int) lease.Attrs {
	return lease.Attrs{
		PublicIP:    netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}),
		BackendType: "vxlan", VNI: 1,
		VTEPMAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(i)},
	}
}

// Nodes that start together never share a subnet: each create is
// create-if-absent, and a node that loses the race takes another subnet. A
// full network is an error naming it.
func TestAcquireRace(t *testing.T) {
	url := startEtcd(t)
	cli := client(t, url)
	ctx := ctxT(t)
	conf := `{"Network": "10.9.0.0/24", "SubnetLen": 28, "Backend": {"Type": "vxlan"}}`
	if _, err := cli.Put(ctx, DefaultPrefix+"/config", conf); err != nil {
		t.Fatal(err)
	}
	cfg, err := newManager(t, url).NetworkConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 15 subnets (the first one is never leased); every node asks for the
	// same previous subnet, so they all race for it first.
	const nodes = 15
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got = map[netip.Prefix]int{}
	)
	for i := 1; i <= nodes; i++ {
		m := newManager(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: attrs(i), Previous: netip.MustParsePrefix("10.9.0.16/28")})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("node %d: %v", i, err)
				return
			}
			if prev, dup := got[l.Subnet]; dup {
				t.Errorf("nodes %d and %d both leased %s", prev, i, l.Subnet)
			}
			got[l.Subnet] = i
		}()
	}
	wg.Wait()
	if len(got) != nodes {
		t.Fatalf("%d distinct leases, want %d", len(got), nodes)
	}
	resp, err := cli.Get(ctx, DefaultPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != nodes {
		t.Fatalf("etcd holds %d leases (%v), want %d", len(resp.Kvs), err, nodes)
	}
	_, err = newManager(t, url).Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: attrs(99)})
	if !errors.Is(err, lease.ErrNetworkFull) || !strings.Contains(err.Error(), "10.9.0.0/24") || !strings.Contains(err.Error(), "15 nodes") {
		t.Fatalf("Acquire in a full network = %v; want ErrNetworkFull naming 10.9.0.0/24 and 15 nodes", err)
	}
}

// A restarted node finds its lease by public IP and keeps the subnet; its
// new attributes are published. Renew works until the lease is gone.
func TestExistingRenewWatch(t *testing.T) {
	url := startEtcd(t)
	cli := client(t, url)
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "/x/config", `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`); err != nil {
		t.Fatal(err)
	}
	// A lease written by a flannel node shares the etcd.
	if _, err := cli.Put(ctx, "/x/subnets/10.244.2.0-24", `{"PublicIP":"172.17.8.103","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"ee:8a:1f:f7:96:c7"}}`); err != nil {
		t.Fatal(err)
	}
	m := newManagerAt(t, url, "/x/")
	cfg, err := m.NetworkConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}

	updates := make(chan lease.Update, 16)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go m.Watch(wctx, func(u lease.Update) { updates <- u })
	if u := next(t, updates); !u.Snapshot || len(u.Leases) != 1 || u.Leases[0].Attrs.VTEPMAC.String() != "ee:8a:1f:f7:96:c7" {
		t.Fatalf("first update = %+v; want a snapshot with flannel's lease", u)
	}

	if _, found, err := m.Existing(ctx, cfg, attrs(1).PublicIP); err != nil || found {
		t.Fatalf("Existing before any lease = %v, %v", found, err)
	}
	l, err := m.Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: attrs(1), Previous: netip.MustParsePrefix("10.244.2.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	if l.Subnet == netip.MustParsePrefix("10.244.2.0/24") || time.Until(l.Expiration) < 50*time.Second {
		t.Errorf("Acquire = %v expiring %v; want another subnet than the taken previous one, a 1m TTL", l.Subnet, l.Expiration)
	}
	if u := next(t, updates); len(u.Events) != 1 || u.Events[0].Type != lease.Added || u.Events[0].Lease.Subnet != l.Subnet {
		t.Fatalf("watch after Acquire = %+v; want the new lease added", u)
	}

	existing, found, err := m.Existing(ctx, cfg, attrs(1).PublicIP)
	if err != nil || !found || existing.Subnet != l.Subnet || existing.Attrs.VTEPMAC.String() != attrs(1).VTEPMAC.String() {
		t.Fatalf("Existing = %v, %v, %v; want %v with its MAC", existing, found, err, l.Subnet)
	}
	a2 := attrs(1)
	a2.VTEPMAC = net.HardwareAddr{2, 0, 0, 0, 0, 0x77}
	again, err := m.Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: a2})
	if err != nil || again.Subnet != l.Subnet {
		t.Fatalf("Acquire again = %v, %v; want the same subnet %v", again.Subnet, err, l.Subnet)
	}
	if u := next(t, updates); len(u.Events) != 1 || u.Events[0].Lease.Attrs.VTEPMAC.String() != a2.VTEPMAC.String() {
		t.Fatalf("watch after the MAC change = %+v", u)
	}
	if _, err := m.Renew(ctx, again); err != nil {
		t.Fatalf("Renew: %v", err)
	}

	// The lease is revoked (as when its TTL runs out): the key goes, the
	// watch says so, Renew says it is gone.
	if _, err := cli.Revoke(ctx, m.leaseID); err != nil {
		t.Fatal(err)
	}
	if u := next(t, updates); len(u.Events) != 1 || u.Events[0].Type != lease.Removed || u.Events[0].Lease.Subnet != l.Subnet {
		t.Fatalf("watch after the revoke = %+v; want the lease removed", u)
	}
	if _, err := m.Renew(ctx, again); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("Renew of a revoked lease = %v, want ErrLeaseGone", err)
	}
}

func next(t *testing.T, ch <-chan lease.Update) lease.Update {
	t.Helper()
	select {
	case u := <-ch:
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no watch update")
		return lease.Update{}
	}
}

func TestNetworkConfigErrors(t *testing.T) {
	url := startEtcd(t)
	cli := client(t, url)
	ctx := ctxT(t)
	m := newManager(t, url)
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if _, err := m.NetworkConfig(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NetworkConfig without a config = %v; want it to wait until the context ends", err)
	}
	if _, err := cli.Put(ctx, DefaultPrefix+"/config", `{"Network": "10.244.0.0/16", "Backend": {"Type": "udp"}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NetworkConfig(ctx); !errors.Is(err, netconf.ErrInvalid) || !strings.Contains(err.Error(), "udp") {
		t.Errorf("NetworkConfig with udp = %v; want ErrInvalid naming the backend", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without endpoints succeeded")
	}
}

// Dual-stack nodes that start together never share an IPv4 or an IPv6
// subnet, although a dual-stack key holds both: a node that loses the race
// for one family picks again for both. There are as many nodes as subnets,
// so every node must get one: a node that takes a lost race for a taken
// subnet of both families finds the network full too early (CI saw "all 15
// subnets are leased (11 nodes hold leases)").
func TestAcquireRaceDualStack(t *testing.T) {
	url := startEtcd(t)
	cli := client(t, url)
	ctx := ctxT(t)
	conf := `{"Network": "10.9.0.0/24", "SubnetLen": 28, "EnableIPv6": true, "IPv6Network": "fd00:9::/60", "IPv6SubnetLen": 64, "Backend": {"Type": "vxlan"}}`
	if _, err := cli.Put(ctx, DefaultPrefix+"/config", conf); err != nil {
		t.Fatal(err)
	}
	cfg, err := newManager(t, url).NetworkConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 15 // SubnetMin skips the first of 16, in each family
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		got4  = map[netip.Prefix]int{}
		got6  = map[netip.Prefix]int{}
		start = make(chan struct{})
	)
	for i := 1; i <= nodes; i++ {
		m := newManager(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := m.Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: attrs(i),
				Previous: netip.MustParsePrefix("10.9.0.16/28"), Previous6: netip.MustParsePrefix("fd00:9:0:1::/64")})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("node %d: %v", i, err)
				return
			}
			if prev, dup := got4[l.Subnet]; dup {
				t.Errorf("nodes %d and %d both leased %s", prev, i, l.Subnet)
			}
			if prev, dup := got6[l.Subnet6]; dup {
				t.Errorf("nodes %d and %d both leased %s", prev, i, l.Subnet6)
			}
			got4[l.Subnet], got6[l.Subnet6] = i, i
		}()
	}
	close(start)
	wg.Wait()
	resp, err := cli.Get(ctx, DefaultPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != nodes {
		t.Fatalf("etcd holds %d leases (%v), want %d", len(resp.Kvs), err, nodes)
	}
}
