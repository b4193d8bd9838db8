//go:build kube

package node

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestSoakCluster is the cluster soak (make soak-cluster; not in CI): the
// conformance cluster (three kubelet nodes with kube-proxy and CoreDNS,
// cnibox from bin/cnibox.yaml, its conflist wrapped in multi for a
// secondary network on the whereabouts IPAM) under a churn of pod creates
// and deletes while a seeded fault injector does one fault at a time, with
// the invariants checked all along and the leftovers compared with the pods
// that exist at the end. $CNIBOX_SOAK_DURATION is the churn's length (Go
// duration, default 10m), $CNIBOX_SOAK_SEED the seed (default: the time),
// $CNIBOX_SOAK_REPORT the directory of soak.log and summary.txt.
// docs/reliability.md says what it does and what it found.
func TestSoakCluster(t *testing.T) {
	durS := os.Getenv("CNIBOX_SOAK_DURATION")
	if durS == "" {
		t.Skip("$CNIBOX_SOAK_DURATION is not set: the soak runs with make soak-cluster")
	}
	dur, err := time.ParseDuration(durS)
	if err != nil {
		t.Fatalf("$CNIBOX_SOAK_DURATION=%q: %v (a Go duration: 10m)", durS, err)
	}
	seed := uint64(time.Now().UnixNano() % 1e6)
	if s := os.Getenv("CNIBOX_SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("$CNIBOX_SOAK_SEED=%q: %v", s, err)
		}
	}
	report := cmp.Or(os.Getenv("CNIBOX_SOAK_REPORT"), t.TempDir())
	if err := os.MkdirAll(report, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startSoak(t, 3, seed, dur, report)
	c := s.c
	s.logf("soak: seed %d, duration %v, %d nodes", seed, dur, len(c.nodes))

	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, fn := range []func(<-chan struct{}){s.observe, s.probeLoop, s.sampleRSS} {
		wg.Go(func() { fn(stop) })
	}
	faultsDone := make(chan struct{})
	go func() { s.injectFaults(end); close(faultsDone) }()
	step(t, "churn for "+dur.String(), func() { s.churn(end) })
	<-faultsDone
	step(t, "delete the churned pods, then a quiet minute", s.quiesce)
	close(stop)
	wg.Wait()
	step(t, "leftovers on every node", s.checkLeftovers)
	sum := s.summary()
	if err := os.WriteFile(filepath.Join(report, "summary.txt"), []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("summary (%s):\n%s", report, sum)
	if s.runningSecondary == 0 {
		t.Errorf("no pod ran with the secondary network (%s): the soak did not test it", wbNAD)
	}
	if n := s.totalBreaches(); n > 0 {
		t.Errorf("%d breaches (soak.log in %s says when and after which fault)", n, report)
	}
}

// startSoak starts the soak's cluster with nodes nodes (cnibox deployed,
// the agent trusting the soak's namespaces' NADs) and sets up its
// networks, namespaces, policy and probers.
func startSoak(t *testing.T, nodes int, seed uint64, dur time.Duration, report string) *soak {
	tools := env(t, "CNIBOX_CONFORMANCE_TOOLS", "test/conformance/build.sh's directory (CoreDNS, the pause image)")
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	manifest := env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)")
	kubeBinaries(t)
	images := append(writeConformanceImages(t, t.TempDir(), tools), imageTar)
	c := startClusterWith(t, nodes, clusterOpts{env: conformanceEnv()})
	c.importImages(images...)
	d := render(t, nil, manifest)
	c.deployNetwork("soak", trustSoak(t, d.yaml), "kube-system", "cnibox")
	s := newSoak(t, c, seed, dur, report)
	step(t, "the soak's networks, namespaces, policy and probers", s.setup)
	return s
}

// soak is the run's shared state: what the churn, the injector and the
// checkers read and write, under mu.
type soak struct {
	t      *testing.T
	c      *cluster
	seed   uint64
	dur    time.Duration
	report string
	logw   *os.File
	start  time.Time

	mu      sync.Mutex
	rng     *rand.Rand
	pods    map[string]*podState // ns/name -> what the observer saw
	seq     int
	created int
	deleted int
	running int // pods seen Running
	// runningSecondary: pods seen Running with a secondary address
	runningSecondary int
	faults           map[string]int
	lastKind         string    // the kind of the fault in progress or the last one
	lastAt           time.Time // when it started
	fault            *faultNow // the fault in progress, nil between faults
	breaches         map[string]int
	longest          map[string]time.Duration // longest unreachability by the fault before it
	rss              map[string][]rssSample
	probers          map[string]string // node name -> prober pod's netns path (denied peers)
	allowed          map[string]string // node name -> allowed prober's netns path
	// unsettled: node name -> when its agent was last started again (a
	// kill or a reboot): the allowed prober, a pod of soakPolicyNS, may
	// have been pending (closed) until then, and is not used as a peer
	// for newPodBound after it
	unsettled map[string]time.Time
	// allowedIP, allowedAt: node name -> its allowed prober's address in
	// the API, and when the observer first saw it there
	allowedIP map[string]string
	allowedAt map[string]time.Time
}

// faultNow is the fault being injected: its kind and node ("" for the
// control plane).
type faultNow struct {
	kind, node string
}

func newSoak(t *testing.T, c *cluster, seed uint64, dur time.Duration, report string) *soak {
	f, err := os.Create(filepath.Join(report, "soak.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &soak{t: t, c: c, seed: seed, dur: dur, report: report, logw: f, start: time.Now(),
		rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), pods: map[string]*podState{}, faults: map[string]int{}, unsettled: map[string]time.Time{},
		allowedIP: map[string]string{}, allowedAt: map[string]time.Time{},
		breaches: map[string]int{}, longest: map[string]time.Duration{}, rss: map[string][]rssSample{},
		probers: map[string]string{}, allowed: map[string]string{}}
}

// logf writes a line to soak.log (with the time since the start) and the
// test's log.
func (s *soak) logf(format string, args ...any) {
	line := fmt.Sprintf("%s +%6.1fs %s", time.Now().UTC().Format("15:04:05.000"), time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
	s.mu.Lock()
	fmt.Fprintln(s.logw, line)
	s.mu.Unlock()
	s.t.Log(line)
}

// breach logs a breach of invariant with the fault before it.
func (s *soak) breach(invariant, format string, args ...any) {
	s.mu.Lock()
	s.breaches[invariant]++
	before := "none yet"
	if s.lastKind != "" {
		before = fmt.Sprintf("%s %.1fs earlier", s.lastKind, time.Since(s.lastAt).Seconds())
	}
	if s.fault != nil {
		before = "during " + s.fault.kind + " " + s.fault.node
	}
	s.mu.Unlock()
	s.logf("BREACH %s: %s (fault: %s)", invariant, fmt.Sprintf(format, args...), before)
}

func (s *soak) totalBreaches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.breaches {
		n += v
	}
	return n
}

// intn is the run's seeded random number in [0, n).
func (s *soak) intn(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(n)
}
