package policynft_test

import (
	"fmt"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nstest"
)

// benchNode is an engine with 2,000 pods in 20 namespaces (100 on this
// node), 10 NetworkPolicies per namespace (ingress from a label of the
// namespace on TCP 80-81, egress to the other namespaces), and a Sink on a
// fresh namespace, fully synced.
func benchNode(b *testing.B) (*policy.Engine, *policynft.Syncer) {
	nstest.RequireRoot(b)
	e := policy.NewEngine("n1")
	for ns := range 20 {
		name := fmt.Sprintf("ns%d", ns)
		e.SetNamespace(&policy.Namespace{Name: name, Labels: map[string]string{"team": fmt.Sprint(ns % 4)}})
		for i := range 100 {
			node := "n2"
			if i < 5 {
				node = "n1"
			}
			e.SetPod(&policy.Pod{Namespace: name, Name: fmt.Sprintf("p%d", i), Node: node,
				Labels: map[string]string{"app": fmt.Sprintf("a%d", i%10), "tier": fmt.Sprint(i % 3)},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, byte(ns), byte(i), 2})}})
		}
		for k := range 10 {
			e.SetNetworkPolicy(benchPolicy(name, k))
		}
	}
	s, err := policynft.New(nstest.NewNS(b, "pb"))
	must(b, err)
	b.Cleanup(func() { s.Close() })
	m := e.Model()
	d := policymodel.Delta{Rules: true}
	for id := range m.Sets {
		d.AddSets = append(d.AddSets, id)
	}
	must(b, s.Apply(m, d))
	return e, s
}

func benchPolicy(ns string, k int) *networkingv1.NetworkPolicy {
	return np(ns, fmt.Sprintf("np%d", k), networkingv1.NetworkPolicySpec{
		PodSelector: *sel("app", fmt.Sprintf("a%d", k)),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: sel("tier", fmt.Sprint(k%3))}},
			Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80, 81)},
		}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", fmt.Sprint(k%4))}},
		}},
	})
}

// BenchmarkPolicyFullSync: the first sync of a restarted agent (the table
// replaced in place, one transaction).
func BenchmarkPolicyFullSync(b *testing.B) {
	e, s := benchNode(b)
	c := policynft.Change(e.Model(), policymodel.Delta{}, true)
	for b.Loop() {
		if err := s.ApplyChange(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPolicyPodRelabel: a pod's label change (set elements only).
func BenchmarkPolicyPodRelabel(b *testing.B) {
	e, s := benchNode(b)
	i := 0
	for b.Loop() {
		i++
		p := &policy.Pod{Namespace: "ns1", Name: "p1", Node: "n2", IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, 1, 2})},
			Labels: map[string]string{"app": fmt.Sprintf("a%d", i%10), "tier": fmt.Sprint(i % 3)}}
		d := e.SetPod(p) // before Model: the model of the change
		must(b, s.Apply(e.Model(), d))
	}
}

// BenchmarkPolicyChange: a NetworkPolicy changed (the rules rewritten).
func BenchmarkPolicyChange(b *testing.B) {
	e, s := benchNode(b)
	i := 0
	for b.Loop() {
		i++
		p := benchPolicy("ns0", 0)
		p.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{port(tcp, 80+i%2)}
		d := e.SetNetworkPolicy(p)
		must(b, s.Apply(e.Model(), d))
	}
}
