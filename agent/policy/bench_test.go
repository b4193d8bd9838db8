package policy

import (
	"fmt"
	"net/netip"
	"runtime"
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
