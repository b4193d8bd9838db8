package policynft_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The cost of make bench-policy's burst on the engine and the syncer
// alone, as any user (netops/nft/nftfake: the messages are built and
// applied in memory; the kernel's own work and acks are not in it):
//
//	go test -run '^$' -bench 'PolicyBurst|PolicyFirstSync' -benchmem -count 5 ./agent/policynft

// burstEngine is an engine on n1 in bench-policy's cluster (a third of
// the pods on this node, as on its three nodes): namespaces bp0-bp9 of
// 100 pods each with 200 NetworkPolicies of test/internal/policyload's
// shape (backgroundPolicy), and namespace x, of 1,000 pods app=xK (K <
// 200: each burst policy's ingress peer holds five), that no policy
// selects yet.
func burstEngine() *policy.Engine {
	e := policy.NewEngine("n1")
	e.SetNodeAddrs([]netip.Addr{nodeAddr, nodeAddr6})
	pod := func(ns string, i int, labels map[string]string, ip netip.Addr) {
		node := "n2"
		if i%3 == 0 {
			node = "n1"
		}
		e.SetPod(&policy.Pod{Namespace: ns, Name: fmt.Sprintf("p%d", i), Node: node, Labels: labels, IPs: []netip.Addr{ip}})
	}
	for i := range 10 {
		e.SetNamespace(&policy.Namespace{Name: fmt.Sprintf("bp%d", i), Labels: map[string]string{"team": fmt.Sprintf("t%d", i%4)}})
	}
	for j := range 1000 {
		k := j / 10
		pod(fmt.Sprintf("bp%d", j%10), j, map[string]string{"app": fmt.Sprintf("a%d", k%10), "tier": fmt.Sprintf("t%d", (k/10)%3)},
			netip.AddrFrom4([4]byte{10, 97, byte(j >> 8), byte(j)}))
	}
	for k := range 200 {
		e.SetNetworkPolicy(backgroundPolicy(k))
	}
	e.SetNamespace(&policy.Namespace{Name: "x", Labels: map[string]string{"ns": "x"}})
	for i := range 1000 {
		pod("x", i, map[string]string{"app": fmt.Sprintf("x%d", i%200)}, netip.AddrFrom4([4]byte{10, 98, byte(i >> 8), byte(i)}))
	}
	return e
}

// backgroundPolicy is policyload.Policy's k-th of 10 namespaces: in bpK%10,
// app=a(K/10%10) takes TCP 8000+K from tier=t(K%3) and namespaces
// team=t(K%4), and sends TCP 9000+K to those namespaces.
func backgroundPolicy(k int) *networkingv1.NetworkPolicy {
	team := sel("team", fmt.Sprintf("t%d", k%4))
	return np(fmt.Sprintf("bp%d", k%10), fmt.Sprintf("np%d", k), networkingv1.NetworkPolicySpec{
		PodSelector: *sel("app", fmt.Sprintf("a%d", (k/10)%10)),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: sel("tier", fmt.Sprintf("t%d", k%3))}, {NamespaceSelector: team}},
			Ports: []networkingv1.NetworkPolicyPort{port(tcp, 8000+k)},
		}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: team}}, Ports: []networkingv1.NetworkPolicyPort{port(tcp, 9000+k)},
		}},
	})
}

// BenchmarkPolicyBurst: bench-policy's 200 request/response policies
// (burstPolicy) added one at a time to namespace x of 1,000 pods, each
// change committed before the next (Apply before Run), on a table synced
// with burstEngine's 200 other policies. One op is the 200 changes.
func BenchmarkPolicyBurst(b *testing.B) {
	benchBurst(b, func() *policynft.Syncer { return policynft.NewOn(nft.OpenDial(nftfake.New().Dial())) })
}

// BenchmarkPolicyBurstKernel: BenchmarkPolicyBurst on this kernel, in a
// namespace of its own (root): the kernel's work and its acks too.
func BenchmarkPolicyBurstKernel(b *testing.B) {
	nstest.RequireRoot(b)
	benchBurst(b, func() *policynft.Syncer {
		s, err := policynft.New(nstest.NewNS(b, "pburst"))
		must(b, err)
		return s
	})
}

func benchBurst(b *testing.B, syncer func() *policynft.Syncer) {
	const n = 200
	ps := make([]*networkingv1.NetworkPolicy, n)
	for k := range ps {
		ps[k] = burstPolicy(k, n)
	}
	var cpu time.Duration
	var heap float64
	for range b.N {
		b.StopTimer()
		e := burstEngine()
		s := syncer()
		must(b, s.Full(e.Model()))
		b.StartTimer()
		c0 := cpuTime()
		for _, p := range ps {
			d := e.SetNetworkPolicy(p) // before Model: the model of the change
			must(b, s.Apply(e.Model(), d))
		}
		cpu += cpuTime() - c0
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = float64(ms.HeapAlloc) / (1 << 20)
		runtime.KeepAlive(e)
		if st := s.Stats(); st.Failed > 0 {
			b.Fatalf("%d of %d transactions failed (each then a full sync)", st.Failed, st.Applied+st.Failed)
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(heap, "heap-MiB") // live after the last burst: the engine's and the syncer's
}

// cpuTime is the CPU time the process used so far (user and system, all
// its threads: the garbage collector's too), which a loaded machine
// does not stretch as it does the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPolicyFirstSync: the first sync of a restarted agent whose
// engine holds burstEngine's 2,000 pods and 200 policies and the burst's
// 200: the engine fed (pods, then policies held, as the watcher's first
// list feeds it) and its model written to an empty table in one
// transaction. peak-heap-MiB is the most heap in use seen meanwhile
// (sampled every 2 ms), the fake kernel's tables in it.
func BenchmarkPolicyFirstSync(b *testing.B) {
	benchFirstSync(b, func() *policynft.Syncer { return policynft.NewOn(nft.OpenDial(nftfake.New().Dial())) })
}

// BenchmarkPolicyFirstSyncKernel: BenchmarkPolicyFirstSync on this
// kernel, in a namespace of its own (root).
func BenchmarkPolicyFirstSyncKernel(b *testing.B) {
	nstest.RequireRoot(b)
	benchFirstSync(b, func() *policynft.Syncer {
		s, err := policynft.New(nstest.NewNS(b, "pfirst"))
		must(b, err)
		return s
	})
}

func benchFirstSync(b *testing.B, syncer func() *policynft.Syncer) {
	const n = 200
	ps := make([]*networkingv1.NetworkPolicy, n)
	for k := range ps {
		ps[k] = burstPolicy(k, n)
	}
	var cpu time.Duration
	var peak, live uint64
	for range b.N {
		b.StopTimer()
		s := syncer()
		runtime.GC()
		stop := samplePeak(&peak, &live)
		b.StartTimer()
		c0 := cpuTime()
		e := burstEngine()
		e.Hold()
		for _, p := range ps {
			e.SetNetworkPolicy(p)
		}
		d := e.Release()
		must(b, s.Full(e.Model()))
		cpu += cpuTime() - c0
		b.StopTimer()
		stop()
		if got := len(e.Model().Rules.Ingress.NetworkPolicy); got < n {
			b.Fatalf("%d policies in the model (delta %v), want at least %d", got, d.Rules, n)
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(live)/(1<<20), "peak-live-MiB")
}

// samplePeak raises *peak to the heap in use and *live to the heap the
// last collection found live (what sets the collector's goal, and so the
// peak, GOGC 100: twice it) every 2 ms until stop returns. The peak
// depends on where the collections fall; the live heap much less.
func samplePeak(peak, live *uint64) (stop func()) {
	done, over := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(over)
		var ms runtime.MemStats
		lm := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			runtime.ReadMemStats(&ms)
			*peak = max(*peak, ms.HeapAlloc)
			if metrics.Read(lm); lm[0].Value.Kind() == metrics.KindUint64 {
				*live = max(*live, lm[0].Value.Uint64())
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); <-over }
}
