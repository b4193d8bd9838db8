package whereabouts

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/netops/nstest"
)

// startEtcd runs Debian's etcd on the private loopback.
func startEtcd(t *testing.T) string { return runEtcd(t).url }

// etcdServer is an etcd the test can stop and start again on its data.
type etcdServer struct {
	url         string
	stop, start func()
}

// runEtcd starts etcd; stop and start take it down and bring it back with
// its data, as an outage would.
func runEtcd(t *testing.T) *etcdServer {
	t.Helper()
	bin := nstest.RequireProgram(t, "etcd", "etcd-server")
	const url, peer = "http://127.0.0.1:24890", "http://127.0.0.1:24891"
	dir := t.TempDir()
	var cmd *exec.Cmd
	e := &etcdServer{url: url}
	e.stop = func() {
		if cmd != nil {
			cmd.Process.Kill()
			cmd.Wait()
			cmd = nil
		}
	}
	e.start = func() {
		cmd = exec.Command(bin, "--data-dir", dir, "--name", "t", "--listen-client-urls", url, "--advertise-client-urls", url,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			c, err := net.DialTimeout("tcp", "127.0.0.1:24890", time.Second)
			if err == nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd did not start: %v", err)
			}
		}
	}
	t.Cleanup(e.stop)
	e.start()
	return e
}

// pools asks an agent for the pools (what cnibox inspect ipam shows).
func pools(t *testing.T, n *node) map[string]agentapi.IPAMPool {
	t.Helper()
	out, err := tryPools(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryPools is pools for a caller that waits out an agent not answering yet.
func tryPools(n *node) (map[string]agentapi.IPAMPool, error) {
	resp, err := (&agentapi.Client{Socket: n.socket}).IPAM(context.Background(), agentapi.OpIPAMPools, &agentapi.IPAMRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]agentapi.IPAMPool{}
	for _, p := range resp.Pools {
		out[p.Name] = p
	}
	return out, nil
}

// Without Kubernetes: two podman-style hosts share a LAN range through
// their agents on etcd. Concurrent ADDs on both get distinct addresses; with
// the agent down ADD fails (11) and reserves nothing, DEL succeeds and the
// release is written once the agent is back.
func TestEtcdHosts(t *testing.T) {
	cnibox, agent := binaries(t)
	url := startEtcd(t)
	args := []string{"--cluster-ipam-backend", "etcd", "--etcd-endpoints", url}
	hosts := []*node{startAgent(t, agent, "host1", "", args...), startAgent(t, agent, "host2", "", args...)}
	wb := cniboxPlugin(t, cnibox)
	conf := func(n *node) string {
		return `{"cniVersion":"1.0.0","name":"lan","type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","range":"192.168.100.0/24",` +
			`"range_start":"192.168.100.10","gateway":"192.168.100.1","network_name":"lan","agentSocket":"` + n.socket + `"}}`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const perHost = 40
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for h, n := range hosts {
		for i := 0; i < perHost; i++ {
			wg.Add(1)
			go func(h, i int, n *node) {
				defer wg.Done()
				cid := fmt.Sprintf("h%d-c%d", h, i)
				out, err := wb.call(ctx, "ADD", cid, "/"+cid, conf(n))
				if err != nil {
					t.Error(err)
					return
				}
				ip := firstIP(t, out)
				mu.Lock()
				defer mu.Unlock()
				if other, dup := got[ip]; dup {
					t.Errorf("%s handed out to %s and %s", ip, other, cid)
				}
				got[ip] = cid
			}(h, i, n)
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(got) != 2*perHost {
		t.Fatalf("%d addresses for %d ADDs", len(got), 2*perHost)
	}
	for ip := range got {
		a := netip.MustParseAddr(ip)
		if !netip.MustParsePrefix("192.168.100.0/24").Contains(a) || a.Less(netip.MustParseAddr("192.168.100.10")) {
			t.Errorf("%s lies outside 192.168.100.10-192.168.100.254", ip)
		}
	}
	p := pools(t, hosts[1])["lan-192.168.100.0-24"]
	if len(p.Allocations) != 2*perHost {
		t.Fatalf("pool lan-192.168.100.0-24 has %d allocations, want %d: %+v", len(p.Allocations), 2*perHost, p)
	}

	// cnibox inspect cluster-ipam shows the pool and who holds what.
	out, err := exec.Command(cnibox, "inspect", "cluster-ipam", "--agent-socket", hosts[0].socket).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "lan-192.168.100.0-24") || strings.Count(string(out), "\nIPPool") != 2*perHost {
		t.Errorf("cnibox inspect cluster-ipam: %v\n%s", err, out)
	}

	// The agent of host1 goes down.
	hosts[0].stop()
	_, err = wb.call(ctx, "ADD", "down", "/down", conf(hosts[0]))
	if err == nil || !strings.Contains(err.Error(), `"code":11`) || !strings.Contains(err.Error(), "--cluster-ipam") {
		t.Errorf("ADD without the agent: %v; want code 11 naming --cluster-ipam", err)
	}
	if _, err := wb.call(ctx, "DEL", "h0-c0", "/h0-c0", conf(hosts[0]), "CNIBOX_DATA_DIR="+hosts[0].dataDir); err != nil {
		t.Errorf("DEL without the agent: %v", err)
	}
	back := startAgent(t, agent, "host1", filepath.Dir(hosts[0].socket), args...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		p := pools(t, back)["lan-192.168.100.0-24"]
		held := false
		for _, a := range p.Allocations {
			held = held || a.ContainerID == "h0-c0" || a.ContainerID == "down"
		}
		if !held && len(p.Allocations) == 2*perHost-1 {
			break
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(p)
			t.Fatalf("the queued release of h0-c0 was not written (or the failed ADD left a reservation): %s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// DEL everything, twice.
	for cid := range reverse(got) {
		for k := 0; k < 2; k++ {
			if _, err := wb.call(ctx, "DEL", cid, "/"+cid, conf(hosts[1])); err != nil {
				t.Error(err)
			}
		}
	}
	if p := pools(t, hosts[1])["lan-192.168.100.0-24"]; len(p.Allocations) != 0 {
		t.Errorf("after DEL: %+v", p.Allocations)
	}
}

func reverse(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[v] = k
	}
	return out
}

// With etcd down (the agent up): ADD fails with code 11 naming etcd, well
// before the runtime's own deadline, and reserves nothing; DEL succeeds;
// once etcd is back the agent writes the queued releases, and a container
// added again under its ID (podman's restart) keeps the address it gets.
func TestEtcdOutage(t *testing.T) {
	cnibox, agent := binaries(t)
	etcd := runEtcd(t)
	host := startAgent(t, agent, "host1", "", "--cluster-ipam-backend", "etcd", "--etcd-endpoints", etcd.url)
	wb := cniboxPlugin(t, cnibox)
	conf := `{"cniVersion":"1.0.0","name":"lan","type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","range":"192.168.101.0/24",` +
		`"network_name":"lan","agentSocket":"` + host.socket + `"}}`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, cid := range []string{"before1", "before2"} {
		if _, err := wb.call(ctx, "ADD", cid, "/"+cid, conf); err != nil {
			t.Fatal(err)
		}
	}

	etcd.stop()
	duringOutage(t, ctx, wb, "", conf, "etcd")

	etcd.start()
	// podman starts before2 again at once: the release queued for its
	// first life must not free what it gets now.
	out, err := wb.call(ctx, "ADD", "before2", "/before2", conf)
	if err != nil {
		t.Fatalf("ADD once etcd is back: %v", err)
	}
	ip := firstIP(t, out)
	deadline := time.Now().Add(90 * time.Second)
	for {
		held := map[string]string{}
		ps, err := tryPools(host) // the agent's etcd client reconnects meanwhile
		for _, a := range ps["lan-192.168.101.0-24"].Allocations {
			held[a.ContainerID] = a.IP
		}
		_, queued := ps[filepath.Join(host.dataDir, "whereabouts-pending")]
		if err == nil && !queued && fmt.Sprint(held) == fmt.Sprint(map[string]string{"before2": ip}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after etcd came back the pool holds %v (%v; releases still queued: %v), want before2 at %s alone "+
				"(the queued releases written, nothing of the failed ADD)", held, err, queued, ip)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// duringOutage runs, at once, the ADD of "during" and the DELs of "before1"
// and "before2" (pods ns/<cid>) with the pools' store unreachable: the DELs
// succeed, the ADD fails with code 11 naming store, and each answers well
// before the runtime gives up (kubelet's CRI deadline is 2 minutes, the
// role's own as well). At once: each waits out one call's bound.
func duringOutage(t *testing.T, ctx context.Context, p plugin, ns, conf, store string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range []struct{ cmd, cid string }{{"ADD", "during"}, {"DEL", "before1"}, {"DEL", "before2"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, ccancel := context.WithTimeout(ctx, 90*time.Second)
			defer ccancel()
			_, err := p.call(cctx, c.cmd, c.cid, ns+"/"+c.cid, conf)
			switch {
			case c.cmd == "DEL" && err != nil:
				t.Errorf("DEL with %s unreachable: %v", store, err)
			case c.cmd == "ADD" && (err == nil || !strings.Contains(err.Error(), `"code":11`) || !strings.Contains(err.Error(), store)):
				t.Errorf("ADD with %s unreachable: %v; want code 11 naming %s, before the runtime gives up", store, err, store)
			}
		}()
	}
	wg.Wait()
}
