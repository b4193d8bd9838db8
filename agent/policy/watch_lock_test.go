//go:build !nokube

package policy

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// idSink records the IDs of the model's policies at each delta.
type idSink struct {
	mu  sync.Mutex
	ids map[string]bool
	ch  chan struct{}
}

func (s *idSink) Apply(m *policymodel.Model, d policymodel.Delta) error {
	ids := map[string]bool{}
	for _, p := range m.Policies() {
		ids[p.ID] = true
	}
	s.mu.Lock()
	s.ids = ids
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
	return nil
}

func (s *idSink) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// await waits for the sink's next deltas until the model holds id, or
// fails with why after a generous minute.
func (s *idSink) await(t *testing.T, id, why string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for !s.has(id) {
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("%s not in the model after a minute: %s", id, why)
		}
	}
}

// TestPolicyCompileOutsideLock: while a policy's compile is held (a hook
// blocks it, as a large policy's cut would take long), a second policy
// applied meanwhile reaches the sink; the first lands once its compile
// ends. The compile runs outside the lock that every change waits on, and
// off the informer's goroutine.
func TestPolicyCompileOutsideLock(t *testing.T) {
	sink := &idSink{ch: make(chan struct{}, 1)}
	w := &watcher{e: NewEngine(node), cfg: WatchConfig{Syncer: sink, Log: slog.New(slog.DiscardHandler)}}
	in := testCluster(nil, nil)
	for _, ns := range in.Namespaces {
		w.e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		w.e.SetPod(p)
	}
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	compiling, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	w.beforeCompile = func(id string) {
		if id == "np/x/big" {
			close(compiling)
			<-release
		}
	}
	h := w.handler()
	big := np("x", "big", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{From: []nv1.NetworkPolicyPeer{ipBlock("::/0", hosts(4000, 128))}}}})
	small := np("y", "small", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{}}})
	go h.OnAdd(big, false) // the informer's goroutine: it may block here
	select {
	case <-compiling:
	case <-time.After(time.Minute):
		t.Fatal("the first policy's compile never started")
	}
	go h.OnAdd(small, false)
	sink.await(t, "np/y/small", "the second policy waited for the first's compile")
	if sink.has("np/x/big") {
		t.Fatal("np/x/big in the model while its compile is held")
	}
	once.Do(func() { close(release) })
	sink.await(t, "np/x/big", "the first policy never landed")
}

// TestPolicyEventOrder: a compile that finishes after a later event of its
// policy (an update, a delete) is dropped; a new policy of the same name
// after a delete is not mistaken for the old one's compile.
func TestPolicyEventOrder(t *testing.T) {
	w := &watcher{}
	first := w.number("np/x/p")
	second := w.number("np/x/p")
	other := w.number("np/y/p")
	if w.isLatest("np/x/p", first, false) || !w.isLatest("np/x/p", second, false) || !w.isLatest("np/y/p", other, false) {
		t.Fatal("an update's compile is not the only latest one")
	}
	del := w.number("np/x/p")
	if w.isLatest("np/x/p", second, false) || !w.isLatest("np/x/p", del, true) {
		t.Fatal("a delete is not the latest event")
	}
	again := w.number("np/x/p")
	for _, n := range []uint64{first, second, del} {
		if w.isLatest("np/x/p", n, false) {
			t.Errorf("event %d before the delete taken for the new policy's (%d)", n, again)
		}
	}
	if !w.isLatest("np/x/p", again, false) {
		t.Error("the new policy's compile dropped")
	}
}

// TestCapIssueEvent: the Warning Event of a capped policy names the field
// and the cap.
func TestCapIssueEvent(t *testing.T) {
	c := compileNP(np("x", "big", nv1.NetworkPolicySpec{Ingress: []nv1.NetworkPolicyIngressRule{{
		From: []nv1.NetworkPolicyPeer{ipBlock("::/0", hosts(4000, 128))}}}}))
	ev := newEventer(nil, node, nil)
	ev.ref(c.id, objectRef("networking.k8s.io/v1", "NetworkPolicy", &np("x", "big", nv1.NetworkPolicySpec{}).ObjectMeta))
	ev.note(c.issues)
	select {
	case e := <-ev.q:
		want := fmt.Sprintf("np/x/big: spec.ingress[0].from[0].ipBlock.except %q: the policy has 4000 ipBlock except entries in all, more than the %d", "4000", maxExcepts)
		if e.Type != corev1.EventTypeWarning || e.Reason != eventReason || len(e.Message) < len(want) || e.Message[:len(want)] != want {
			t.Errorf("event %s %s %q, want a Warning %s starting %q", e.Type, e.Reason, e.Message, eventReason, want)
		}
	default:
		t.Fatalf("no event for %v", c.issues)
	}
}

// TestNamespaceCapEvent: a namespace past its cap gets one Warning Event,
// on the Namespace and in it (where its users look), naming the cap.
func TestNamespaceCapEvent(t *testing.T) {
	m := Resolve(testCluster([]*nv1.NetworkPolicy{manyPeers("many0", 520, 0), manyPeers("many1", 520, 520)}, nil))
	ev := newEventer(nil, node, nil)
	ns := &metav1.ObjectMeta{Name: "x", UID: "u-x"}
	ev.ref(namespaceIssueID("x"), objectRef("v1", "Namespace", ns))
	ev.note(m.Issues)
	select {
	case e := <-ev.q:
		if e.Namespace != "x" || e.InvolvedObject.Kind != "Namespace" || e.InvolvedObject.Name != "x" || e.Reason != eventReason ||
			!strings.Contains(e.Message, "more than the 1024 the engine takes of one namespace") {
			t.Errorf("event in %q on %s %s: %s %q", e.Namespace, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	default:
		t.Fatalf("no event for %v", m.Issues)
	}
	if len(ev.q) != 0 {
		t.Errorf("%d more events: one per namespace", len(ev.q))
	}
}

// modelSink keeps the last model handed to it.
type modelSink struct {
	mu sync.Mutex
	m  *policymodel.Model
	ch chan struct{}
}

func (s *modelSink) Apply(m *policymodel.Model, _ policymodel.Delta) error {
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
	return nil
}

// await waits for the sink's next models until ok takes one, or fails
// with why after a generous minute.
func (s *modelSink) await(t *testing.T, ok func(*policymodel.Model) bool, why string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		s.mu.Lock()
		m := s.m
		s.mu.Unlock()
		if m != nil && ok(m) {
			return
		}
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("not in the sink's model after a minute: %s", why)
		}
	}
}

// TestStagedEvaluateOutsideLock: while the flow log's staged evaluation of
// a batch is held (a hook blocks it, as a large policy's evaluation takes
// seconds), another namespace's new pod is placed: the sink gets the model
// with it, and the batch's record comes once the evaluation ends. Before,
// the batch was evaluated under the watcher's lock, which every pod's
// placement waits on (issue 60, finding 5: a batch of 8 held it 15.9 s).
func TestStagedEvaluateOutsideLock(t *testing.T) {
	sink := &modelSink{ch: make(chan struct{}, 1)}
	w := &watcher{e: NewEngine(node), cfg: WatchConfig{Syncer: sink, Log: slog.New(slog.DiscardHandler)}}
	in := testCluster(nil, nil)
	for _, ns := range in.Namespaces {
		w.e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		w.e.SetPod(p)
	}
	w.e.SetFlowLog(FlowLogSetting{})
	w.e.SetStagedNetworkPolicy(np("x", "only-web", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), PolicyTypes: ingressOnly,
		Ingress: []nv1.NetworkPolicyIngressRule{{Ports: []nv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 80)}}}}))
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	evaluating, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	w.stagedEval.beforeEval = func() {
		close(evaluating)
		<-release
	}
	done := make(chan []flowlog.Record, 1)
	go func() {
		done <- w.records([]loggedflows.Event{{Time: time.Now(), Allow: true, Counter: "dflt-in", Proto: 6,
			Src: netip.AddrPortFrom(ip("y", "b"), 40000), Dst: netip.AddrPortFrom(ip("x", "a"), 81)}})
	}()
	select {
	case <-evaluating:
	case <-time.After(time.Minute):
		t.Fatal("the staged evaluation never started")
	}
	p := apiPod("y", "d")
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.2.0.9"}}
	go w.handler().OnAdd(PodFromAPI(p), false)
	sink.await(t, func(m *policymodel.Model) bool { _, ok := m.LocalPods["y/d"]; return ok },
		"y/d was not placed while x's staged evaluation ran")
	select {
	case <-done:
		t.Fatal("the batch's records came before its evaluation ended")
	default:
	}
	once.Do(func() { close(release) })
	recs := <-done
	if len(recs) != 1 || recs[0].Verdict != flowlog.StagedDeny {
		t.Errorf("records %+v, want one staged-deny", recs)
	}
}

// TestStagedBudget: one batch evaluates at most stagedBudget connections
// the cache does not know; a connection seen before in the batch (or an
// earlier one of the same model) is answered by the cache; past the
// budget the staged records are not made, and counted.
func TestStagedBudget(t *testing.T) {
	e := scaleEngine(testCluster(nil, nil))
	e.SetFlowLog(FlowLogSetting{})
	e.SetStagedNetworkPolicy(np("x", "only-web", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), PolicyTypes: ingressOnly,
		Ingress: []nv1.NetworkPolicyIngressRule{{Ports: []nv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 80)}}}}))
	var st stagedEvals
	evals := 0
	st.beforeEval = func() { evals++ }
	ev := func(port uint16) loggedflows.Event {
		return loggedflows.Event{Time: time.Now(), Allow: true, Counter: "dflt-in", Proto: 6,
			Src: netip.AddrPortFrom(ip("y", "b"), 40000), Dst: netip.AddrPortFrom(ip("x", "a"), port)}
	}
	s := e.snapshot(ip("y", "b"), ip("x", "a"))
	st.begin(s.m.Generation)
	var recs []flowlog.Record
	for i := range stagedBudget + 10 {
		recs = s.appendRecords(recs, ev(uint16(1000+i)), &st)
		recs = s.appendRecords(recs, ev(uint16(1000+i)), &st) // again: cached
	}
	if evals != stagedBudget || len(recs) != 2*stagedBudget || st.skipped != 20 {
		t.Errorf("%d evaluations, %d records, %d skipped; want %d, %d, 20", evals, len(recs), st.skipped, stagedBudget, 2*stagedBudget)
	}
	if n := st.end(time.Now()); n != 20 {
		t.Errorf("end: %d skipped to warn of, want 20", n)
	}
	st.begin(s.m.Generation) // the next batch of the same model: the cache answers
	recs = s.appendRecords(nil, ev(1000), &st)
	if evals != stagedBudget || len(recs) != 1 {
		t.Errorf("next batch: %d evaluations, %d records; want the cache's answer", evals, len(recs))
	}
}
