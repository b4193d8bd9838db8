//go:build kube

package lbipam

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/test/kube"
)

// holdWatch follows the default namespace's Services one change at a
// time, as their watch reports them: what each holds, and every address
// held by two at one version or moved from a Service (dups).
type holdWatch struct {
	t      *testing.T
	cs     kubernetes.Interface
	w      watch.Interface
	lastRV string
	held   map[string]string   // address -> Service
	holds  map[string][]string // Service -> addresses
	first  map[string]string   // the first address each Service held
	dups   []string
}

func watchHolds(t *testing.T, cs kubernetes.Interface) *holdWatch {
	w, err := cs.CoreV1().Services("default").Watch(context.Background(), metav1.ListOptions{})
	must(t, err)
	h := &holdWatch{t: t, cs: cs, w: w, held: map[string]string{}, holds: map[string][]string{}, first: map[string]string{}}
	t.Cleanup(func() { h.w.Stop() })
	return h
}

func (h *holdWatch) apply(s *corev1.Service, deleted bool) {
	for _, a := range h.holds[s.Name] {
		delete(h.held, a)
	}
	h.holds[s.Name] = nil
	if deleted {
		return
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if o, ok := h.held[in.IP]; ok && o != s.Name {
			h.dups = append(h.dups, fmt.Sprintf("%s held by %s and %s at version %s", in.IP, o, s.Name, s.ResourceVersion))
		}
		h.held[in.IP] = s.Name
		h.holds[s.Name] = append(h.holds[s.Name], in.IP)
		if f, ok := h.first[s.Name]; ok && f != in.IP {
			h.dups = append(h.dups, fmt.Sprintf("%s moved from %s to %s at version %s: a new leader must keep what the Services hold", s.Name, f, in.IP, s.ResourceVersion))
		}
		h.first[s.Name] = in.IP
	}
}

// drain applies what the watch has reported so far.
func (h *holdWatch) drain() {
	for {
		select {
		case ev, open := <-h.w.ResultChan():
			if !open { // (the server ends watches: go on from the last version seen)
				var err error
				h.w, err = h.cs.CoreV1().Services("default").Watch(context.Background(), metav1.ListOptions{ResourceVersion: h.lastRV})
				must(h.t, err)
				continue
			}
			if s, ok := ev.Object.(*corev1.Service); ok {
				h.apply(s, ev.Type == watch.Deleted)
				h.lastRV = s.ResourceVersion
			} else {
				h.t.Logf("watch: %s %v", ev.Type, ev.Object)
			}
		default:
			return
		}
	}
}

// leaseWatch follows the Lease LeaseName's versions: who held it, when it
// was renewed and taken, as the holders wrote them (the test's processes
// share one clock).
type leaseWatch struct {
	t      *testing.T
	cs     kubernetes.Interface
	w      watch.Interface
	lastRV string
	recs   []leaseRec
}

type leaseRec struct {
	holder         string
	renew, acquire time.Time
	duration       time.Duration
}

func watchLease(t *testing.T, cs kubernetes.Interface) *leaseWatch {
	lw := &leaseWatch{t: t, cs: cs}
	lw.open()
	t.Cleanup(func() { lw.w.Stop() })
	return lw
}

func (lw *leaseWatch) open() {
	w, err := lw.cs.CoordinationV1().Leases("kube-system").Watch(context.Background(),
		metav1.ListOptions{FieldSelector: "metadata.name=" + LeaseName, ResourceVersion: lw.lastRV})
	must(lw.t, err)
	lw.w = w
}

// drain records what the watch has reported so far.
func (lw *leaseWatch) drain() {
	for {
		select {
		case ev, open := <-lw.w.ResultChan():
			if !open {
				lw.open()
				continue
			}
			l, ok := ev.Object.(*coordv1.Lease)
			if !ok {
				lw.t.Logf("Lease watch: %s %v", ev.Type, ev.Object)
				continue
			}
			lw.lastRV = l.ResourceVersion
			r := leaseRec{}
			if l.Spec.HolderIdentity != nil {
				r.holder = *l.Spec.HolderIdentity
			}
			if l.Spec.RenewTime != nil {
				r.renew = l.Spec.RenewTime.Time
			}
			if l.Spec.AcquireTime != nil {
				r.acquire = l.Spec.AcquireTime.Time
			}
			if l.Spec.LeaseDurationSeconds != nil {
				r.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
			}
			lw.recs = append(lw.recs, r)
		default:
			return
		}
	}
}

// retaken judges the Lease having gone back to old after index from of
// the versions seen: it waits for that version, then reports the gap
// between the last renewal by the holder before and old's taking it, and
// whether the holder before had let it lapse (the gap longer than its
// duration: a machine too loaded to renew in time, which the election
// allows) or old took a Lease its holder kept renewing (a bug).
func (lw *leaseWatch) retaken(from int, old string) (gap time.Duration, lapsed bool, ok bool) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lw.drain()
		for i := max(from, 1); i < len(lw.recs); i++ {
			r, prev := lw.recs[i], lw.recs[i-1]
			if r.holder == old && prev.holder != old {
				if prev.holder == "" { // released: free at once
					return 0, true, true
				}
				gap = r.acquire.Sub(prev.renew)
				return gap, gap > prev.duration, true
			}
		}
	}
	return 0, false, false
}

// startController runs a controller in a child process (TestLBIPAMAgent)
// as node, through proxy p if not nil, until the test ends.
func startController(t *testing.T, kc, node string, p *kube.Proxy) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLBIPAMAgent$", "-test.v")
	cmd.Env = append(os.Environ(), "LBIPAM_AGENT_KUBECONFIG="+kc, "LBIPAM_AGENT_NODE="+node, "LBIPAM_AGENT_DELAY=30ms")
	if p != nil {
		cmd.Env = append(cmd.Env, "LBIPAM_AGENT_API=https://"+p.Addr)
	}
	out, err := os.Create(t.TempDir() + "/agent.log")
	must(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// leaseHolder is the holder of the Lease LeaseName ("" none).
func leaseHolder(cs kubernetes.Interface) string {
	l, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), LeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestKubeLBIPAMCutOff: two controllers, each reaching the API server
// through a proxy of the test's; the leader is cut off (its process keeps
// running) in the middle of allocating, once with its connections reset
// and refused, once held open with nothing forwarded, while Services keep
// coming: the other takes over and allocates them, and at no version of
// the Services do two hold one address or does a Service's address move;
// once healed, the cut-off controller leads no more and every Service
// holds an address.
func TestKubeLBIPAMCutOff(t *testing.T) {
	cs, kc := startAPI(t)
	ctx := context.Background()
	must(t, createPool(cs, "pool", `{"blocks":[{"cidr":"192.0.2.0/25"}]}`)) // 126
	svcs := cs.CoreV1().Services("default")
	hw := watchHolds(t, cs)
	lw := watchLease(t, cs)
	proxies := map[string]*kube.Proxy{"node-1": kube.NewProxy(t), "node-2": kube.NewProxy(t)}
	for node, p := range proxies {
		startController(t, kc, node, p)
	}
	total := 0
	create := func(n int) {
		for range n {
			total++
			_, err := svcs.Create(ctx, lbService(fmt.Sprintf("s%03d", total), 80), metav1.CreateOptions{})
			must(t, err)
		}
	}
	waitAll := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); countHeld(hw.holds) < total && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			hw.drain()
		}
		if countHeld(hw.holds) != total {
			t.Fatalf("%s: %d of %d Services hold an address", what, countHeld(hw.holds), total)
		}
	}
	create(10)
	waitAll("before the cuts")
	for _, how := range []kube.Cut{kube.Reset, kube.Silent} {
		old := leaseHolder(cs)
		if proxies[old] == nil {
			t.Fatalf("the Lease's holder %q is no controller of the test", old)
		}
		create(20)
		before := countHeld(hw.holds)
		for deadline := time.Now().Add(30 * time.Second); countHeld(hw.holds) < before+2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			hw.drain()
		}
		t0 := time.Now()
		proxies[old].Set(how)
		create(10)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if l := leaseHolder(cs); l != "" && l != old {
				t.Logf("cut %d (1 reset, 2 silent): %s cut off from the API; %s leads %v after", how, old, l, time.Since(t0))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a minute after %s was cut off, the Lease's holder is %q", old, leaseHolder(cs))
			}
		}
		waitAll(fmt.Sprintf("%s cut off", old))
		lw.drain()
		healed := len(lw.recs)
		proxies[old].Set(kube.Open)
		create(5)
		waitAll(fmt.Sprintf("%s's partition healed", old))
		if l := leaseHolder(cs); l == old {
			// The other may have let the Lease lapse on a loaded machine
			// (the test's Lease lasts a second): old may then take it. What
			// it must never do is take a Lease the other kept renewing.
			switch gap, lapsed, seen := lw.retaken(healed, old); {
			case !seen:
				t.Errorf("%s leads again after its partition healed, and the Lease's watch never showed it taking the Lease", old)
			case lapsed:
				t.Logf("%s leads again after its partition healed: the other's last renewal was %v before (longer than the Lease's duration: it had lapsed)", old, gap)
			default:
				t.Errorf("%s leads again after its partition healed, taking the Lease %v after the other's last renewal, within the Lease's duration: it took a Lease its holder kept", old, gap)
			}
		}
	}
	hw.drain()
	for _, d := range hw.dups {
		t.Error(d)
	}
}
