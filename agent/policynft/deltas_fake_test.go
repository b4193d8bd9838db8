package policynft_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestPolicyDeltasMatchFullSyncTable: random NetworkPolicies added,
// changed (the same name, another spec: the same chain names, other
// rules) and deleted, and pods relabeled, each change written as a delta
// (the renderer keeps the chains it finds unchanged, rewrites the buckets
// whose policies changed, deletes the chains of the policies gone); after
// each, the table is the one a fresh agent's full sync of the model
// writes (checkTable). 40 names in each of 2 namespaces over 32
// buckets: some buckets hold several policies, some empty out and fill
// again.
func TestPolicyDeltasMatchFullSyncTable(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			l := newFakeLab("x/a", "x/b", "x/c", "y/a", "y/b")
			n := newFakeNode(t, l)
			must(t, n.sink.Full(n.e.Model()))
			r := rand.New(rand.NewPCG(seed, 61))
			live := map[string]bool{}
			for step := range 50 {
				name := fmt.Sprintf("p%d", r.IntN(40))
				ns := []string{"x", "y"}[r.IntN(2)]
				var what string
				var d policymodel.Delta
				switch k := r.IntN(10); {
				case k < 6:
					what = "set " + ns + "/" + name
					d = n.e.SetNetworkPolicy(randomPolicy(r, ns, name))
					live[ns+"/"+name] = true
				case k < 9 && len(live) > 0:
					what = "delete " + ns + "/" + name
					d = n.e.DeleteNetworkPolicy(ns, name)
					delete(live, ns+"/"+name)
				default:
					p := l.pods[r.IntN(len(l.pods))]
					app := []string{"a", "b", "c"}[r.IntN(3)]
					what = "relabel " + p.ns + "/" + p.name + " app=" + app
					d = n.e.SetPod(p.apiPod(map[string]string{"app": app}))
				}
				must(t, n.sink.Apply(n.e.Model(), d))
				if st := n.sink.Stats(); st.Failed > 0 {
					t.Fatalf("step %d (%s): %d transactions failed (each then a full sync)", step, what, st.Failed)
				}
				checkTable(t, l, n.e.Model())
				if t.Failed() { // the first step whose table differs
					t.Fatalf("after step %d (%s), %d policies live", step, what, len(live))
				}
			}
		})
	}
}

// randomPolicy is a NetworkPolicy ns/name of random subject, directions,
// peers and ports.
func randomPolicy(r *rand.Rand, ns, name string) *networkingv1.NetworkPolicy {
	app := func() string { return []string{"a", "b", "c"}[r.IntN(3)] }
	ports := func() []networkingv1.NetworkPolicyPort {
		var out []networkingv1.NetworkPolicyPort
		for range r.IntN(3) {
			proto := []corev1.Protocol{tcp, corev1.ProtocolUDP}[r.IntN(2)]
			if r.IntN(4) == 0 {
				out = append(out, port(proto, 8000+r.IntN(10), int32(8010+r.IntN(10))))
			} else {
				out = append(out, port(proto, 80+r.IntN(3)))
			}
		}
		return out
	}
	peers := func() []networkingv1.NetworkPolicyPeer {
		var out []networkingv1.NetworkPolicyPeer
		for range r.IntN(3) {
			if r.IntN(3) == 0 {
				out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("ns", []string{"x", "y"}[r.IntN(2)])})
			} else {
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: sel("app", app())})
			}
		}
		return out
	}
	spec := networkingv1.NetworkPolicySpec{PodSelector: *sel("app", app())}
	if r.IntN(4) == 0 {
		spec.PodSelector = *sel() // every pod of ns
	}
	types := [][]networkingv1.PolicyType{{networkingv1.PolicyTypeIngress}, {networkingv1.PolicyTypeEgress},
		{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}[r.IntN(3)]
	spec.PolicyTypes = types
	for _, pt := range types {
		for range r.IntN(3) {
			if pt == networkingv1.PolicyTypeIngress {
				spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: peers(), Ports: ports()})
			} else {
				spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{To: peers(), Ports: ports()})
			}
		}
	}
	return np(ns, name, spec)
}
