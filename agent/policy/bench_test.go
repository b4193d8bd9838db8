package policy

import (
	"fmt"
	"net/netip"
	"testing"

	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
				Ports:  []NamedPort{{Name: "web", Proto: TCP, Port: 8080}}}
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

// BenchmarkPodRelabel: one pod's label change in that cluster.
func BenchmarkPodRelabel(b *testing.B) {
	in := scaleInput()
	e := NewEngine(node)
	for _, np := range in.NetworkPolicies {
		e.SetNetworkPolicy(np)
	}
	for _, ns := range in.Namespaces {
		e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		e.SetPod(p)
	}
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
