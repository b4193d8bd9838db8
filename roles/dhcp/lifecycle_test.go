package dhcp_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

// TestRestartRenews is the package's one slow test (about 15 s: the
// server's T1, option 58, is 15 s of a 2-minute lease, dnsmasq's shortest,
// instead of its half): the daemon is killed (SIGKILL) and restarted; the
// new daemon adopts the lease from the store, renews it at T1 (the
// server's lease file shows a later expiry than when the first daemon
// died), and DEL after the restart releases it.
func TestRestartRenews(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the lease's T1 (15 s)")
	}
	n := newNode(t)
	l := newLAN(t, "--dhcp-option=option:T1,15")
	dir := t.TempDir()
	d := startDaemon(t, dir)
	c := conf("1.0.0", d.socket, "")
	p := n.NewPod("r")
	res := roletest.Result(t, n.Must(macvlan.Role, "ADD", p, c), "1.0.0")
	ip := res.IPs[0].Address.IP.String()
	l.waitLeases("lists the pod", func(m map[string]string) bool { return m[ip] != "" })

	d.kill()
	// the expiry the first daemon left (read once it is gone: a renewal
	// of its own would not count)
	first := expiry(t, l.leases()[ip])
	d = startDaemon(t, dir)
	got := waitFor(t, 110*time.Second, "the adopted lease renewed", func() (map[string]string, bool) {
		m := l.leases()
		return m, m[ip] != "" && expiry(t, m[ip]) > first
	})
	t.Logf("lease %s renewed by the restarted daemon: expiry %d -> %d", ip, first, expiry(t, got[ip]))
	// dnsmasq writes its lease file before its ACK reaches the daemon, which
	// records the renewal after that: wait for the daemon's record too.
	waitFor(t, 30*time.Second, "the store's lease renewed after it was acquired", func() ([]lease.Lease, bool) {
		ls := leasesInStore(t, d.data)
		return ls, len(ls) == 1 && ls[0].Renewed.After(ls[0].Acquired)
	})
	n.Must(macvlan.Role, "DEL", p, c)
	l.waitLeases("released after the restart", func(m map[string]string) bool { return m[ip] == "" })
	if ls := leasesInStore(t, d.data); len(ls) != 0 {
		t.Errorf("store still lists %+v", ls)
	}
}

// expiry reads the expiry (seconds since the epoch) of a lease file line.
func expiry(t *testing.T, line string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.Fields(line)[0], 10, 64)
	if err != nil {
		t.Fatalf("lease line %q: %v", line, err)
	}
	return v
}

// waitFor polls f until it reports true or the deadline passes.
func waitFor[T any](t *testing.T, within time.Duration, what string, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, ok := f()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %v)", what, within, v)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestGC: GC releases the leases of attachments not in the valid list (the
// pod's namespace gone), and keeps the others.
func TestGC(t *testing.T) {
	n := newNode(t)
	l := newLAN(t)
	d := startDaemon(t, t.TempDir())
	c := conf("1.1.0", d.socket, "")
	keep, gone := n.NewPod("keep"), roletest.Pod{ID: "gone", Netns: ownNS(t, "dhcpgc")}
	rk := roletest.Result(t, n.Must(macvlan.Role, "ADD", keep, c), "1.1.0")
	rg := roletest.Result(t, n.Must(macvlan.Role, "ADD", gone, c), "1.1.0")
	ipk, ipg := rk.IPs[0].Address.IP.String(), rg.IPs[0].Address.IP.String()
	l.waitLeases("both", func(m map[string]string) bool { return m[ipk] != "" && m[ipg] != "" })
	if err := netops.DeleteNamedNS(strings.TrimPrefix(gone.Netns, "/run/netns/")); err != nil {
		t.Fatal(err)
	}
	n.Must(macvlan.Role, "GC", roletest.Pod{}, roletest.WithKeep(t, c, keep))
	l.waitLeases("only the kept pod's", func(m map[string]string) bool { return m[ipk] != "" && m[ipg] == "" })
	n.Must(macvlan.Role, "DEL", keep, c)
	l.waitLeases("empty", func(m map[string]string) bool { return len(m) == 0 })
}

// TestConcurrent: 50 pods, 8 at a time, get 50 different leases, and DEL
// releases them all.
func TestConcurrent(t *testing.T) {
	n := newNode(t)
	l := newLAN(t)
	d := startDaemon(t, t.TempDir())
	c := conf("1.1.0", d.socket, "")
	const pods, par = 50, 8
	ps := make([]roletest.Pod, pods)
	for i := range ps {
		ps[i] = n.NewPod(fmt.Sprintf("c%d", i))
	}
	ips := make([]string, pods)
	run := func(cmd string) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, par)
		errs := make(chan error, pods)
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				out, err := n.Call(macvlan.Role, cmd, p, c)
				if err != nil {
					errs <- fmt.Errorf("%s %s: %w", cmd, p.ID, err)
					return
				}
				if cmd == "ADD" {
					ips[i] = roletest.Result(t, out, "1.1.0").IPs[0].Address.IP.String()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	run("ADD")
	seen := map[string]bool{}
	for _, ip := range ips {
		if seen[ip] {
			t.Errorf("address %s handed out twice", ip)
		}
		seen[ip] = true
	}
	l.waitLeases("50 leases", func(m map[string]string) bool {
		for _, ip := range ips {
			if m[ip] == "" {
				return false
			}
		}
		return len(m) == pods
	})
	run("DEL")
	l.waitLeases("all released", func(m map[string]string) bool { return len(m) == 0 })
	if ls := leasesInStore(t, d.data); len(ls) != 0 {
		t.Errorf("store still lists %d leases", len(ls))
	}
}
