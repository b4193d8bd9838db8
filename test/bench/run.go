package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// The timed verbs.
const (
	opAdd   = "ADD"
	opCheck = "CHECK"
	opDel   = "DEL"
)

// sample is what the batches of one (case, mode, op, side) measured,
// merged over rounds.
type sample struct {
	lat  []time.Duration // every call's latency
	wall time.Duration   // sum of the phases' wall times (for ops/s)
	cpu  time.Duration   // CPU (user+sys) of the bench and its reaped children during the phases
	errs int
}

// cpuNow returns the user+sys CPU time used so far by this process and its
// reaped children (the plugins and what they exec'd, once waited for).
func cpuNow() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// cpuPerOp is the CPU time per call, in ms.
func (s *sample) cpuPerOp() float64 {
	if s == nil || len(s.lat) == 0 {
		return 0
	}
	return ms(s.cpu) / float64(len(s.lat))
}

func (s *sample) opsPerSec() float64 {
	if s == nil || s.wall <= 0 {
		return 0
	}
	return float64(len(s.lat)) / s.wall.Seconds()
}

// pod is one pod sandbox of a batch.
type pod struct {
	idx    int
	nsName string
	nsPath string
	rt     *libcni.RuntimeConf
	ips    []netip.Addr
	added  bool
}

func modeName(conc int) string {
	if conc == 1 {
		return "seq"
	}
	return fmt.Sprintf("C=%d", conc)
}

// sampleFor returns the sample of a key, creating it.
func (b *bench) sampleFor(group, mode, op, side string) *sample {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.samples == nil {
		b.samples = map[string]*sample{}
	}
	k := group + "|" + mode + "|" + op + "|" + side
	s := b.samples[k]
	if s == nil {
		s = &sample{}
		b.samples[k] = s
	}
	return s
}

func (b *bench) lookup(group, mode, op, side string) *sample {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.samples[group+"|"+mode+"|"+op+"|"+side]
}

// runCNI runs every case at every concurrency, rounds times, alternating
// whole batches between ours and the reference.
func (b *bench) runCNI() {
	// Warm-up, untimed: the first pod creates the bridge, the store file,
	// the reference's long-lived iptables chains. The reference goes first:
	// once its firewall made iptables' filter table, our firewall puts its
	// chains there too (as on a node where iptables runs), and the baseline
	// must hold them.
	for _, c := range b.cases {
		if c.linkKind() == "macvlan" {
			if err := b.ensureLower(); err != nil {
				b.fail("%s: %v", c.name, err)
			}
		}
		for i := len(b.sides) - 1; i >= 0; i-- {
			b.batch(c, b.sides[i], 1, 1, false, "warm-up")
		}
	}
	snap, err := takeNFT()
	if err != nil {
		b.fail("list nftables of the node after the warm-up: %v", err)
	}
	b.baseline = snap
	if b.o.verbose {
		for _, k := range snap.keys() {
			b.logf("after the warm-up: %s: %d", k, snap[k])
		}
	}
	for r := 1; r <= b.o.rounds; r++ {
		for _, c := range b.cases {
			for _, conc := range b.o.conc {
				for _, s := range b.sides {
					if b.stopping.Load() {
						return
					}
					b.batch(c, s, conc, b.o.n, true, fmt.Sprintf("round %d/%d", r, b.o.rounds))
				}
			}
		}
	}
}

// batch runs n pods through ADD, CHECK and DEL with conc calls at a time and
// checks the results and that nothing is left.
func (b *bench) batch(c *cniCase, s *side, conc, n int, record bool, label string) {
	what := fmt.Sprintf("%s %s %s %s", c.name, modeName(conc), s.name, label)
	list, err := c.list(s, b.o.n)
	if err != nil {
		b.fail("%s: conflist: %v", what, err)
		return
	}
	start := time.Now()
	pods := make([]*pod, 0, n)
	defer func() {
		for _, p := range pods {
			b.deleteNS(p.nsName)
		}
		time.Sleep(b.o.settle)
	}()
	for i := 0; i < n; i++ {
		name, path, err := b.newNS()
		if err != nil {
			b.fail("%s: create pod namespace: %v", what, err)
			return
		}
		id := containerID(os.Getpid(), name, s.name)
		p := &pod{idx: i, nsName: name, nsPath: path, rt: &libcni.RuntimeConf{
			ContainerID: id, NetNS: path, IfName: "eth0",
			Args: [][2]string{
				{"IgnoreUnknown", "1"},
				{"K8S_POD_NAMESPACE", "bench"},
				{"K8S_POD_NAME", fmt.Sprintf("pod-%d", i)},
				{"K8S_POD_INFRA_CONTAINER_ID", id},
				{"K8S_POD_UID", id[:32]},
			},
		}}
		if c.hasPortmap() {
			p.rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{
				{"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"},
			}}
		}
		pods = append(pods, p)
	}

	mode := modeName(conc)
	if s.ours && record {
		b.useLog(c.name, mode)
	} else {
		b.useLog("other", "")
	}
	rec := func(op string) *sample {
		if !record {
			return &sample{}
		}
		return b.sampleFor(c.name, mode, op, s.name)
	}

	b.phase(what, opAdd, conc, pods, rec(opAdd), func(p *pod) (time.Duration, error) {
		ctx, cancel := opCtx()
		defer cancel()
		t0 := time.Now()
		r, err := s.cni.AddNetworkList(ctx, list, p.rt)
		d := time.Since(t0)
		if err != nil {
			return d, err
		}
		p.added = true
		res, err := current.NewResultFromResult(r)
		if err != nil {
			return d, fmt.Errorf("result: %w", err)
		}
		for _, ipc := range res.IPs {
			a, _ := netip.AddrFromSlice(ipc.Address.IP)
			p.ips = append(p.ips, a.Unmap())
		}
		return d, nil
	})
	b.checkAddresses(what, s, pods)
	if !record {
		b.checkVisible(what, s, c, pods)
	}
	var added []*pod
	for _, p := range pods {
		if p.added {
			added = append(added, p)
		}
	}
	b.phase(what, opCheck, conc, added, rec(opCheck), func(p *pod) (time.Duration, error) {
		ctx, cancel := opCtx()
		defer cancel()
		t0 := time.Now()
		err := s.cni.CheckNetworkList(ctx, list, p.rt)
		return time.Since(t0), err
	})
	// DEL every pod, also those whose ADD failed (a runtime does).
	b.phase(what, opDel, conc, pods, rec(opDel), func(p *pod) (time.Duration, error) {
		ctx, cancel := opCtx()
		defer cancel()
		t0 := time.Now()
		err := s.cni.DelNetworkList(ctx, list, p.rt)
		return time.Since(t0), err
	})
	b.checkClean(what, s, c, pods)
	b.vlogf("%s: %d pods in %.1fs", what, n, time.Since(start).Seconds())
}

// phase runs fn for every pod, conc at a time, and records each call's
// latency and the phase's wall time. A failed call is a failed check.
func (b *bench) phase(what, op string, conc int, pods []*pod, rec *sample, fn func(p *pod) (time.Duration, error)) {
	if len(pods) == 0 {
		return
	}
	var (
		mu     sync.Mutex
		lats   = make([]time.Duration, 0, len(pods))
		errs   []string
		nerr   int
		next   = make(chan *pod)
		wg     sync.WaitGroup
		stopAt = len(pods)
	)
	start, cpu0 := time.Now(), cpuNow()
	for w := 0; w < conc && w < stopAt; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				d, err := fn(p)
				mu.Lock()
				lats = append(lats, d)
				if err != nil {
					nerr++
					if len(errs) < 3 {
						errs = append(errs, fmt.Sprintf("pod %d (%s): %v", p.idx, p.rt.ContainerID[:12], err))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range pods {
		if b.stopping.Load() && op != opDel {
			break
		}
		next <- p
	}
	close(next)
	wg.Wait()
	wall, cpu := time.Since(start), cpuNow()-cpu0
	b.mu.Lock()
	rec.lat = append(rec.lat, lats...)
	rec.wall += wall
	rec.cpu += cpu
	rec.errs += nerr
	b.mu.Unlock()
	switch {
	case nerr > 0 && op == opCheck && strings.Contains(what, " ref ") && strings.Contains(errs[0], "could not check ipv6 dnat"):
		// Not ours to fix: containernetworking/plugins#819 (portmap up to
		// 1.2 checks an IPv6 DNAT chain of an IPv4-only pod). Timed anyway.
		b.warnOnce("ref-portmap-check", "warning: the reference's CHECK fails (%s): containernetworking/plugins#819, "+
			"portmap <= 1.2 CHECKs an IPv6 DNAT chain of an IPv4-only pod; the calls are timed all the same", errs[0])
	case nerr > 0:
		b.fail("%s: %d of %d %s calls failed, e.g.:\n  %s", what, nerr, len(pods), op, strings.Join(errs, "\n  "))
	}
}
