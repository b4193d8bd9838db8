package policy

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// scaleInput is 50,000 pods in 500 namespaces (100 on this node) with two
// NetworkPolicies per namespace, one of them a named port from another
// namespace's pods.
func scaleInput() Input {
	in := Input{Node: node}
	for n := 0; n < 500; n++ {
		ns := fmt.Sprintf("ns%d", n)
		in.Namespaces = append(in.Namespaces, &Namespace{Name: ns, Labels: map[string]string{"team": fmt.Sprint(n % 10)}})
		for i := 0; i < 100; i++ {
			p := &Pod{Namespace: ns, Name: fmt.Sprintf("p%d", i), Node: fmt.Sprintf("n%d", (n*100+i)%500),
				Labels: map[string]string{"app": fmt.Sprint(i % 5)},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), byte(i)})},
				Ports:  []NamedPort{{Name: "web", Proto: policymodel.TCP, Port: 8080}}}
			if p.Node == "n0" {
				p.Node = node
			}
			in.Pods = append(in.Pods, p)
		}
		in.NetworkPolicies = append(in.NetworkPolicies,
			np(ns, "deny", nv1.NetworkPolicySpec{PolicyTypes: ingressOnly}),
			np(ns, "web", nv1.NetworkPolicySpec{PodSelector: *sel("app", "1"), Ingress: []nv1.NetworkPolicyIngressRule{{
				From:  []nv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", fmt.Sprint(n%10)), PodSelector: &metav1.LabelSelector{}}},
				Ports: []nv1.NetworkPolicyPort{port("", "web")},
			}}}))
	}
	return in
}

// BenchmarkResolve: the whole model of a 50,000-pod cluster
// (go test -run '^$' -bench Resolve -benchmem ./agent/policy/).
func BenchmarkResolve(b *testing.B) {
	in := scaleInput()
	b.ResetTimer()
	for b.Loop() {
		Resolve(in)
	}
}

// scaleEngine is an engine holding scaleInput, fed as the watcher feeds it
// (held: pods first, then one policy at a time, then Release).
func scaleEngine(in Input) *Engine {
	e := NewEngine(node)
	e.Hold()
	defer e.Release()
	for _, ns := range in.Namespaces {
		e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		e.SetPod(p)
	}
	for _, np := range in.NetworkPolicies {
		e.SetNetworkPolicy(np)
	}
	return e
}

// BenchmarkPolicyChange: one NetworkPolicy's change in that cluster (a
// peer selector of its own: one set to fill).
func BenchmarkPolicyChange(b *testing.B) {
	in := scaleInput()
	e := scaleEngine(in)
	i := 0
	for b.Loop() {
		i++
		e.SetNetworkPolicy(np("ns7", "web", nv1.NetworkPolicySpec{PodSelector: *sel("app", "1"), Ingress: []nv1.NetworkPolicyIngressRule{{
			From: []nv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: sel("app", fmt.Sprint(i%5))}},
		}}}))
	}
}

// BenchmarkEngineMemory: the heap an engine holding that cluster keeps
// (MiB), fed as the watcher feeds it.
func BenchmarkEngineMemory(b *testing.B) {
	in := scaleInput()
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		e := scaleEngine(in)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
		runtime.KeepAlive(e)
	}
}

// BenchmarkPodRelabel: one pod's label change in that cluster.
func BenchmarkPodRelabel(b *testing.B) {
	in := scaleInput()
	e := scaleEngine(in)
	b.Logf("sets %d", len(e.Model().Sets))
	p := *in.Pods[12345]
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		q := p
		q.Labels = map[string]string{"app": fmt.Sprint(i % 5)}
		e.SetPod(&q)
	}
}

// largePolicy is issue 60's finding 5(b): a NetworkPolicy within every
// per-policy cap whose one rule takes ::/0 minus 120 scattered /128s
// (about 14,000 prefixes) on 4,095 named ports (4,095 clauses).
func largePolicy(ns string) *nv1.NetworkPolicy {
	ports := make([]nv1.NetworkPolicyPort, 4095)
	for i := range ports {
		ports[i] = port("", fmt.Sprintf("p%d", i))
	}
	return np(ns, "large", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{
		From: []nv1.NetworkPolicyPeer{ipBlock("::/0", hosts(120, 128))}, Ports: ports}}})
}

// BenchmarkEvaluateLarge: one Evaluate of a connection to a pod that
// largePolicy selects (no clause matches: every one is tried), as the
// flow log's staged evaluation and the DNS proxy's Permit make one; the
// namespace caps lifted (its 4,095 clauses pass them: closed, the
// evaluation is nothing: BenchmarkEvaluateLargeClosed).
func BenchmarkEvaluateLarge(b *testing.B) {
	lim := defaultCapLimits
	lim.nsClauses, lim.nsSets, lim.nodeClauses, lim.nodeSets = 1<<20, 1<<20, 1<<20, 1<<20
	benchEvaluateLarge(b, feed(lim, testCluster([]*nv1.NetworkPolicy{largePolicy("x")}, nil)).Model())
}

// BenchmarkEvaluateLargeClosed: BenchmarkEvaluateLarge with the caps.
func BenchmarkEvaluateLargeClosed(b *testing.B) {
	m := Resolve(testCluster([]*nv1.NetworkPolicy{largePolicy("x")}, nil))
	if len(m.Issues) != 1 || m.Issues[0].Policy != "ns/x" {
		b.Fatalf("issues %v: want x closed", m.Issues)
	}
	benchEvaluateLarge(b, m)
}

func benchEvaluateLarge(b *testing.B, m *policymodel.Model) {
	c := policymodel.Conn{Src: netip.MustParseAddr("2001:db8::1"), Dst: ip("x", "a"), Proto: policymodel.TCP, Port: 80}
	if v := m.Evaluate(policymodel.Ingress, c); v.Allowed {
		b.Fatalf("%v: allowed", v)
	}
	for b.Loop() {
		m.Evaluate(policymodel.Ingress, c)
	}
}

// BenchmarkPodRelabelPublished: BenchmarkPodRelabel with the model handed
// to a reader after each change, as the watcher hands it to the Sink.
func BenchmarkPodRelabelPublished(b *testing.B) {
	in := scaleInput()
	e := scaleEngine(in)
	p := *in.Pods[12345]
	i := 0
	for b.Loop() {
		i++
		q := p
		q.Labels = map[string]string{"app": fmt.Sprint(i % 5)}
		e.SetPod(&q)
		e.Model()
	}
}

// BenchmarkPodChurn: one pod of that cluster deleted and added again, in
// turn (its address leaves and enters a peer set of 5,000 addresses, of
// 306 sets), no model handed out between (the Sink's Apply and a delta's
// transaction read it under the lock).
func BenchmarkPodChurn(b *testing.B) { benchPodChurn(b, false) }

// BenchmarkPodChurnPublished: BenchmarkPodChurn with the model handed out
// after each change (as to a reader that keeps it: a flow log batch, a
// DNS query, a full sync), what the model's copy on write costs a change
// at most.
func BenchmarkPodChurnPublished(b *testing.B) { benchPodChurn(b, true) }

func benchPodChurn(b *testing.B, publish bool) {
	in := scaleInput()
	in.Pods = append(in.Pods, &Pod{Namespace: "ns0", Name: "web", Node: node, Labels: map[string]string{"app": "1"},
		IPs: []netip.Addr{netip.MustParseAddr("10.255.0.1")}}) // ns0's web policy here: team 0's peer sets
	e := scaleEngine(in)
	p := in.Pods[1012] // ns10/p12, of team 0
	if d := e.DeletePod(p.Namespace, p.Name); len(d.Del) != 1 {
		b.Fatalf("the pod left %d sets, want the peer set", len(d.Del))
	}
	e.SetPod(p)
	i := 0
	for b.Loop() {
		i++
		if i%2 == 1 {
			e.DeletePod(p.Namespace, p.Name)
		} else {
			e.SetPod(p)
		}
		if publish {
			e.Model()
		}
	}
}

// BenchmarkPodChurnHanded: BenchmarkPodChurn as the watcher runs it with
// agent/policynft's Syncer (a Handoff): the model taken back (Withdraw)
// before each change and handed over (Apply, Offer) after it. The
// Syncer borrows the model for a delta's transaction (it copies the
// delta's sets on its own goroutine: left out here) and keeps it only for
// a full sync or a DNS query: kept=0 is a transaction of deltas after
// every change (the agent's usual case), kept=1 the model kept after
// every change (the most it costs: BenchmarkPodChurnPublished and the
// handoff's locks).
func BenchmarkPodChurnHanded(b *testing.B) {
	for _, kept := range []bool{false, true} {
		b.Run(fmt.Sprintf("kept=%d", map[bool]int{false: 0, true: 1}[kept]), func(b *testing.B) { benchPodChurnHanded(b, kept) })
	}
}

// handoff is the Syncer's handoff without the kernel: a slot under a
// lock.
type handoff struct {
	mu      sync.Mutex
	offered *policymodel.Model
	kept    bool
}

func (h *handoff) withdraw() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.kept
	h.offered, h.kept = nil, false
	return k
}

func (h *handoff) offer(m *policymodel.Model) {
	h.mu.Lock()
	h.offered, h.kept = m, false
	h.mu.Unlock()
}

func (h *handoff) keep() {
	h.mu.Lock()
	h.kept = h.offered != nil
	h.mu.Unlock()
}

func benchPodChurnHanded(b *testing.B, keep bool) {
	in := scaleInput()
	in.Pods = append(in.Pods, &Pod{Namespace: "ns0", Name: "web", Node: node, Labels: map[string]string{"app": "1"},
		IPs: []netip.Addr{netip.MustParseAddr("10.255.0.1")}})
	e := scaleEngine(in)
	p := in.Pods[1012]
	var h handoff
	i := 0
	for b.Loop() {
		i++
		if h.withdraw() {
			e.Model()
		}
		if i%2 == 1 {
			e.DeletePod(p.Namespace, p.Name)
		} else {
			e.SetPod(p)
		}
		h.offer(e.current())
		if keep {
			h.keep()
		}
	}
}
