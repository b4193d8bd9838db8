package policynft_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// handoffDo is the watcher's change (agent/policy's changeLocked): the
// model taken back first, copied on write when the syncer kept it.
func (w *watched) handoffDo(change func(*policy.Engine) policymodel.Delta) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sink.Withdraw() {
		w.e.Model()
	}
	d := change(w.e)
	if d.Empty() {
		w.sink.Offer(w.e.Model())
		return
	}
	must(w.t, w.sink.Apply(w.e.Model(), d))
}

// TestSyncerBurstTable: a burst of policies handed over from several
// goroutines while transactions take varying time, as bench-policy's 200
// request/response policies arrive; afterwards the table is the model's.
func TestSyncerBurstTable(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			l := newFakeLab("x/a", "x/b", "y/a", "x/rr0", "x/rr1")
			w := &watched{node: newFakeNode(t, l)}
			w.start()
			var rmu sync.Mutex
			r := rand.New(rand.NewPCG(seed, 7))
			policynft.SetBeforeCommit(w.sink, func() {
				rmu.Lock()
				d := time.Duration(r.IntN(3000)) * time.Microsecond
				rmu.Unlock()
				time.Sleep(d)
			})
			w.run()
			const n = 60
			var wg sync.WaitGroup
			next := make(chan int)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range next {
						p := burstPolicy(k, n)
						w.handoffDo(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(p) })
					}
				}()
			}
			for k := range n {
				next <- k
			}
			close(next)
			wg.Wait()
			must(t, w.sink.Wait(context.Background()))
			w.view(func(m *policymodel.Model) bool { checkTable(t, l, m); return true })
		})
	}
}

// burstPolicy is bench-policy's rrPolicy's shape: every pod of x, ingress
// from app=xK on port 10000+K, egress to one address; the last between
// the app=rr pods on 5201.
func burstPolicy(k, n int) *networkingv1.NetworkPolicy {
	in := []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", fmt.Sprintf("x%d", k))}}
	out := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("192.0.2.%d/32", k%256)}}}
	p := 10000 + k
	if k == n-1 {
		p = 5201
		in = []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "rr0")}, {PodSelector: sel("app", "rr1")}}
		out = in
	}
	ports := []networkingv1.NetworkPolicyPort{port(tcp, p)}
	return np("x", fmt.Sprintf("rr%03d", k), networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: in, Ports: ports}},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{To: out, Ports: ports}},
	})
}
