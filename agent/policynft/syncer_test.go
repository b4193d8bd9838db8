package policynft_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// watched is a node fed as the agent's watcher feeds it once synced: the
// changes under one lock, the Sink's Run committing them on its own.
type watched struct {
	*node
	mu sync.Mutex // the watcher's
}

func (w *watched) view(f func(*policymodel.Model) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w.e.Model())
}

func (w *watched) do(change func(*policy.Engine) policymodel.Delta) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := change(w.e); !d.Empty() {
		must(w.t, w.sink.Apply(w.e.Model(), d))
	}
}

// run starts the Sink's Run until the test ends, and returns once Apply
// only queues.
func (w *watched) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.sink.Run(ctx, nil)
	}()
	w.t.Cleanup(func() { cancel(); <-done })
	for !policynft.Running(w.sink) {
		time.Sleep(time.Millisecond)
	}
}

// fromB is x/db: x/a (app=a) takes anything from the pods app=b of x.
var fromB = np("x", "db", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
	From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "b")}}}}})

// TestSyncerCoalesces: what the watcher hands over while a transaction is
// in the kernel is queued (Apply returns at once) and committed as one
// transaction after it, and the table is then as the model says.
func TestSyncerCoalesces(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "y/a")
	w := &watched{node: newNode(t, l)}
	w.e.SetNetworkPolicy(fromB)
	w.start()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	policynft.SetBeforeCommit(w.sink, func() {
		once.Do(func() { close(held); <-release })
	})
	w.run()
	before := w.sink.Stats()
	w.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(80)) })
	<-held // that transaction is on its way; the next changes queue
	xb := l.pod("x/b")
	for i := range 20 {
		app := map[bool]string{true: "b", false: "c"}[i%2 == 1]
		w.do(func(e *policy.Engine) policymodel.Delta { return e.SetPod(xb.apiPod(map[string]string{"app": app})) })
		w.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(80 + i%2)) })
	}
	close(release)
	must(t, w.sink.Wait(context.Background()))
	st := w.sink.Stats()
	if got := st.Applied - before.Applied; got != 2 {
		t.Errorf("%d transactions for 41 changes, 40 of them queued behind the first: want 2", got)
	}
	if st.Failed != before.Failed {
		t.Errorf("%d transactions failed", st.Failed-before.Failed)
	}
	l.checkTraffic(t, w.e.Model())
}

// TestSyncerResyncRepairs: someone flushes a base chain of the policy
// table (the forward hook's jumps gone: x/a is open to everything); the
// periodic full sync puts it back and traffic follows the model again.
func TestSyncerResyncRepairs(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b")
	w := &watched{node: newNode(t, l)}
	w.e.SetNetworkPolicy(web(80))
	w.start()
	xa, xb := l.pod("x/a"), l.pod("x/b")
	if connect(t, xb, xa.ip, policymodel.TCP, 81, denyWait) {
		t.Fatal("x/b reaches x/a:81 before the drift")
	}
	f, err := os.Open(l.nodePath)
	must(t, err)
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	c.FlushChain(&nftables.Chain{Table: &nftables.Table{Name: nft.PolicyTable, Family: nftables.TableFamilyINet}, Name: "forward"})
	must(t, c.Flush())
	if !connect(t, xb, xa.ip, policymodel.TCP, 81, allowWait) {
		t.Fatal("the flushed chain did not open x/a: the test shows nothing")
	}
	w.sink.ResyncEvery(100 * time.Millisecond)
	w.run()
	for deadline := time.Now().Add(2 * time.Minute); w.sink.Stats().Resyncs == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no periodic full sync in 2 minutes, one due every 100 ms")
		}
	}
	l.checkTraffic(t, w.e.Model())
}
