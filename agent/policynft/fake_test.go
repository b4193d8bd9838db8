package policynft_test

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
)

// The syncer's tests of what it writes run on netops/nft/nftfake's
// in-memory kernel, as any user: the table after each step is compared
// with the table a fresh agent's first full sync of the same model writes
// (checkTable), where the lab's tests (root) check the packets.

// fakeLab is the pods "ns/name" of a node without namespaces, addressed
// as newLab addresses them (10.99.0.2, fd00:99::2, ...), and the node's
// fake kernel.
type fakeLab struct {
	k    *nftfake.Kernel
	pods []*labPod
}

func newFakeLab(pods ...string) *fakeLab {
	l := &fakeLab{k: nftfake.New()}
	for i, key := range pods {
		ns, name, _ := strings.Cut(key, "/")
		l.pods = append(l.pods, &labPod{ns: ns, name: name,
			ip:  netip.AddrFrom4([4]byte{10, 99, 0, byte(i + 2)}),
			ip6: netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x99, 15: byte(i + 2)})})
	}
	return l
}

func (l *fakeLab) pod(key string) *labPod {
	for _, p := range l.pods {
		if p.ns+"/"+p.name == key {
			return p
		}
	}
	panic("no pod " + key)
}

// handle is a Handle on the lab's kernel (a CNI call's), closed when the
// test ends.
func (l *fakeLab) handle(t *testing.T) *nft.Handle {
	h := nft.OpenDial(l.k.Dial())
	t.Cleanup(func() { h.Close() })
	return h
}

// newFakeNode is newNode on the fake: an engine that knows the lab's pods
// and namespaces x and y, and a Sink on the lab's kernel.
func newFakeNode(t *testing.T, l *fakeLab, pods ...*labPod) *node {
	n := &node{t: t, e: policy.NewEngine("n1"), sink: policynft.NewOn(nft.OpenDial(l.k.Dial()))}
	t.Cleanup(func() { n.sink.Close() })
	n.e.SetNodeAddrs([]netip.Addr{nodeAddr, nodeAddr6})
	for _, ns := range []string{"x", "y"} {
		n.e.SetNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
	}
	if pods == nil {
		pods = l.pods
	}
	for _, p := range pods {
		n.e.SetPod(p.apiPod(nil))
	}
	t.Cleanup(func() {
		if err := l.k.Err(); err != nil {
			t.Errorf("the fake kernel was sent what it does not model: %v", err)
		}
	})
	return n
}

// notTheModels are the policy table's sets whose elements are not the
// model's: the generation, which a new table starts at random
// (netops/nft/policy_gen.go), and the attached pods, which CNI ADDs and
// DELs write.
var notTheModels = regexp.MustCompile(`(?m)^\t(set|map) (gen|gen-f|gen-e|mark-eg|mark-in|attached-4|attached-6) \{\n(\t\t.*\n)*?\t\}\n`)

// policyTable is the policy table of k, canonical, without the elements
// of notTheModels.
func policyTable(k *nftfake.Kernel) string {
	return notTheModels.ReplaceAllString(k.Table(nftables.TableFamilyINet, nft.PolicyTable), "\t$1 $2 (not the model's)\n")
}

// checkTable fails the test unless the lab's policy table is the one a
// fresh agent's first full sync of m writes.
func checkTable(t *testing.T, l *fakeLab, m *policymodel.Model) {
	t.Helper()
	if got, want := policyTable(l.k), tableOfModel(t, m); got != want {
		t.Errorf("the policy table is not the model's:\n%s", lineDiff(got, want))
	}
}

// lineDiff lists the lines only got has (-) and only want has (+).
func lineDiff(got, want string) string {
	g := map[string]int{}
	for _, l := range strings.Split(got, "\n") {
		g[l]++
	}
	w := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		w[l]++
	}
	var b strings.Builder
	for _, l := range strings.Split(got, "\n") {
		if w[l] > 0 {
			w[l]--
		} else {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if g[l] > 0 {
			g[l]--
		} else {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	if b.Len() == 0 {
		return "(the same lines in another order)\n--- got\n" + got + "--- want\n" + want
	}
	return b.String()
}

// TestSyncerCoalescesTable: what the watcher hands over while a
// transaction is on its way is queued and committed as one transaction
// after it, and the table is then the model's.
func TestSyncerCoalescesTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b", "y/a")
	w := &watched{node: newFakeNode(t, l)}
	w.e.SetNetworkPolicy(fromB)
	w.start()
	checkTable(t, l, w.e.Model())
	held, release := make(chan struct{}), make(chan struct{})
	first := true
	policynft.SetBeforeCommit(w.sink, func() {
		if first {
			first = false
			close(held)
			<-release
		}
	})
	w.run()
	before := w.sink.Stats()
	w.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(80)) })
	<-held
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
	w.view(func(m *policymodel.Model) bool { checkTable(t, l, m); return true })
}

// TestSyncerResyncRepairsTable: someone flushes the forward hook's chain
// of the policy table, adds an address to a set of the model's and a
// chain of their own to the table; the periodic full sync puts the table
// back as the model says.
func TestSyncerResyncRepairsTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b")
	w := &watched{node: newFakeNode(t, l)}
	w.e.SetNetworkPolicy(web(80))
	w.start()
	checkTable(t, l, w.e.Model())

	c, err := l.k.Conn()
	must(t, err)
	table := &nftables.Table{Name: nft.PolicyTable, Family: nftables.TableFamilyINet}
	c.FlushChain(&nftables.Chain{Table: table, Name: "forward"})
	c.AddChain(&nftables.Chain{Table: table, Name: "stray"})
	var set string // a set of the model's (the agent's: attached and pending are the CNI's too)
	w.view(func(m *policymodel.Model) bool {
		for id := range m.Sets {
			if set == "" || string(id) < set {
				set = string(id)
			}
		}
		return true
	})
	ms, err := c.GetSetByName(table, set+"-4")
	must(t, err)
	must(t, c.SetAddElements(ms, []nftables.SetElement{{Key: []byte{10, 99, 0, 200}}}))
	must(t, c.Flush())
	if policyTable(l.k) == tableOfModel(t, w.e.Model()) {
		t.Fatal("the tampered table is still the model's: the test shows nothing")
	}

	w.sink.ResyncEvery(time.Millisecond)
	batches := l.k.Batches()
	w.run()
	for deadline := time.Now().Add(time.Minute); w.sink.Stats().Resyncs == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no periodic full sync in a minute, one due every millisecond")
		}
	}
	w.sink.ResyncEvery(time.Hour)
	if l.k.Batches() == batches {
		t.Error("a full sync committed no transaction")
	}
	w.view(func(m *policymodel.Model) bool { checkTable(t, l, m); return true })
}

// tableOfModel is the policy table a fresh agent's first full sync of m
// writes.
func tableOfModel(t *testing.T, m *policymodel.Model) string {
	t.Helper()
	ref := nftfake.New()
	s := policynft.NewOn(nft.OpenDial(ref.Dial()))
	d := policymodel.Delta{Rules: true}
	for id := range m.Sets {
		d.AddSets = append(d.AddSets, id)
	}
	must(t, s.Apply(m, d))
	must(t, s.Close())
	return policyTable(ref)
}

// TestPolicyRestartTable: the agent goes away (its Sink closed, nothing
// torn down): the table stays as it wrote it. The next agent's first full
// sync replaces it in one transaction: the deleted policy's chains, sets
// and counters are gone, the new policy's are there, and a second full
// sync (which rewrites every chain, to repair what someone changed)
// leaves the same table.
func TestPolicyRestartTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b", "y/a")
	n := newFakeNode(t, l)
	denyX := np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress, Ingress: []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}}, Ports: []networkingv1.NetworkPolicyPort{port(tcp, 81)},
	}}})
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(denyX) })
	n.start()
	checkTable(t, l, n.e.Model())
	old := policyTable(l.k)
	must(t, n.sink.Close()) // the agent is killed
	if got := policyTable(l.k); got != old {
		t.Fatalf("closing the agent's Sink changed the table:\n%s", lineDiff(got, old))
	}

	// The next agent: no deny-all in the API, but a policy isolating y/a.
	n2 := newFakeNode(t, l)
	n2.e.SetNetworkPolicy(np("y", "only-a", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "x"), PodSelector: sel("app", "a")}}}}}))
	if got := policyTable(l.k); got != old {
		t.Fatal("the table changed before the new agent's first sync")
	}
	batches := l.k.Batches()
	n2.start()
	if got := l.k.Batches() - batches; got != 1 {
		t.Errorf("the first full sync took %d transactions, want 1", got)
	}
	checkTable(t, l, n2.e.Model())

	h := l.handle(t)
	sets, err := h.PolicySets()
	must(t, err)
	var want []string
	for id := range n2.e.Model().Sets {
		want = append(want, string(id))
	}
	want = append(want, "guard", nft.PolicyPending, nft.PolicyAttached)
	slices.Sort(want)
	if !slices.Equal(sets, want) {
		t.Errorf("sets after the sync %v, want the model's %v", sets, want)
	}
	counters, err := h.PolicyCounters()
	must(t, err)
	if _, ok := counters[policymodel.CounterName(policymodel.RuleID("np/x/deny/ingress/0").Key())]; ok {
		t.Error("the deleted policy's counter lingers")
	}
	if _, ok := counters[policymodel.CounterName(policymodel.RuleID("np/y/only-a/ingress/0").Key())]; !ok {
		t.Errorf("no counter of the new policy's rule in %v", counters)
	}
	before, err := h.PolicyRuleHandles()
	must(t, err)
	must(t, h.ApplyPolicy(policynft.Change(n2.e.Model(), policymodel.Delta{}, true)))
	after, err := h.PolicyRuleHandles()
	must(t, err)
	if len(before) != len(after) {
		t.Errorf("a second full sync: %d rules, before %d", len(after), len(before))
	}
	checkTable(t, l, n2.e.Model())
}

// TestPolicyPendingTable: a pod's ADD while the agent is down, in a
// namespace where the last policies could select a pod, puts its address
// in the pending set (the table closes it); one in a namespace no policy
// could select is only attached; without the table nothing is marked. The
// next agent's first sync empties the pending set; a DEL and an ADD
// undone take the address out.
func TestPolicyPendingTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "y/a", "x/new", "y/new")
	xa, ya, xnew, ynew := l.pod("x/a"), l.pod("y/a"), l.pod("x/new"), l.pod("y/new")
	allowAll := np("x", "allow-all", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{}}})
	n := newFakeNode(t, l, xa, ya)
	n.e.SetNetworkPolicy(allowAll)
	n.start()
	must(t, n.sink.Close()) // the agent goes down

	h := l.handle(t)
	in := func(set string, want ...netip.Addr) {
		t.Helper()
		got, _, err := h.PolicySetAddrs(set)
		must(t, err)
		slices.SortFunc(got, netip.Addr.Compare)
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", set, got, want)
		}
	}
	if marked, err := h.MarkPolicyPending("x", []netip.Addr{xnew.ip}); err != nil || !marked {
		t.Fatalf("MarkPolicyPending(x) = %v, %v; want marked", marked, err)
	}
	if marked, err := h.MarkPolicyPending("y", []netip.Addr{ynew.ip}); err != nil || marked {
		t.Fatalf("MarkPolicyPending(y) = %v, %v; want not marked (no policy in y)", marked, err)
	}
	in(nft.PolicyPending, xnew.ip)

	// The next agent learns of every pod: its first sync resolves x/new.
	n2 := newFakeNode(t, l)
	n2.e.SetNetworkPolicy(allowAll)
	n2.start()
	in(nft.PolicyPending)
	checkTable(t, l, n2.e.Model())

	// A DEL takes an address out of both sets (twice: already gone is no
	// error); an ADD undone does too.
	_, err := h.MarkPolicyPending("x", []netip.Addr{xnew.ip})
	must(t, err)
	must(t, h.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{xnew.ip}}))
	must(t, h.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{xnew.ip}}))
	in(nft.PolicyPending)
	if att, _, _ := h.PolicySetAddrs(nft.PolicyAttached); slices.Contains(att, xnew.ip) {
		t.Errorf("attached after the DEL: %v", att)
	}
	_, err = h.MarkPolicyPending("x", []netip.Addr{xnew.ip})
	must(t, err)
	must(t, h.UnmarkPolicyPending([]netip.Addr{xnew.ip}))
	in(nft.PolicyPending)

	// No table: nothing marked, nothing fails.
	other := nft.OpenDial(nftfake.New().Dial())
	defer other.Close()
	if marked, err := other.MarkPolicyPending("x", []netip.Addr{xnew.ip}); err != nil || marked {
		t.Errorf("without the table: MarkPolicyPending = %v, %v", marked, err)
	}
	must(t, other.UnmarkPolicyPending([]netip.Addr{xnew.ip}))
	must(t, other.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{xnew.ip}, Masq: true, CheckedPort: "cbx0"}))
}

// TestPolicyGonePodTable: a pod of the node that leaves the API before its
// DEL (force-deleted) goes to the pending set until the DEL; one whose
// DEL came first leaves nothing pending; one that left the API while the
// agent was down is put there by the next agent's first sync.
func TestPolicyGonePodTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b", "x/c", "y/a")
	xa, xb, xc, ya := l.pod("x/a"), l.pod("x/b"), l.pod("x/c"), l.pod("y/a")
	deny := np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})
	n := newFakeNode(t, l, ya)
	n.e.SetNetworkPolicy(deny)
	n.start()
	h := l.handle(t)
	addrs := func(p *labPod) []netip.Addr { return []netip.Addr{p.ip, p.ip6} }
	pending := func() []netip.Addr {
		t.Helper()
		pend, _, err := h.PolicySetAddrs(nft.PolicyPending)
		must(t, err)
		return pend
	}
	for _, p := range []*labPod{xa, xb, xc} {
		if marked, err := h.MarkPolicyPending("x", addrs(p)); err != nil || !marked {
			t.Fatalf("MarkPolicyPending(%s) = %v, %v", p.name, marked, err)
		}
		n.do(func(e *policy.Engine) policymodel.Delta { return e.SetPod(p.apiPod(nil)) })
	}
	if p := pending(); len(p) != 0 {
		t.Fatalf("pending once the agent placed the pods: %v", p)
	}
	checkTable(t, l, n.e.Model())

	n.do(func(e *policy.Engine) policymodel.Delta { return e.DeletePod("x", "a") })
	if p := pending(); !slices.Equal(p, addrs(xa)) {
		t.Errorf("pending after x/a left the API: %v, want its addresses", p)
	}
	must(t, h.UnhookPod(nft.PodUnhook{IPs: addrs(xa)})) // its DEL
	if p := pending(); len(p) != 0 {
		t.Errorf("pending after x/a's DEL: %v", p)
	}

	must(t, h.UnhookPod(nft.PodUnhook{IPs: addrs(xb)}))
	n.do(func(e *policy.Engine) policymodel.Delta { return e.DeletePod("x", "b") })
	if p := pending(); len(p) != 0 {
		t.Errorf("pending after x/b's DEL and deletion: %v (nothing will take it out)", p)
	}

	must(t, n.sink.Close())
	n2 := newFakeNode(t, l, ya)
	n2.e.SetNetworkPolicy(deny)
	n2.start()
	if p := pending(); !slices.Equal(p, addrs(xc)) {
		t.Errorf("pending after the next agent's first sync: %v, want x/c's addresses (gone from the API, not DELed)", p)
	}
	must(t, h.UnhookPod(nft.PodUnhook{IPs: addrs(xc)}))
	if p := pending(); len(p) != 0 {
		t.Errorf("pending after x/c's DEL: %v", p)
	}
}
