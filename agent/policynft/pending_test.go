package policynft_test

import (
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// startAgent starts an agent on l's node that knows only pods and nps (the
// namespaces x and y), and hands the sink its first full sync.
func startAgent(t *testing.T, l *lab, pods []*labPod, nps ...*networkingv1.NetworkPolicy) *node {
	n := &node{t: t, e: policy.NewEngine("n1")}
	var err error
	n.sink, err = policynft.New(l.nodePath)
	must(t, err)
	n.e.SetNodeAddrs([]netip.Addr{nodeAddr, nodeAddr6})
	for _, ns := range []string{"x", "y"} {
		n.e.SetNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
	}
	for _, p := range pods {
		n.e.SetPod(p.apiPod(nil))
	}
	for _, p := range nps {
		n.e.SetNetworkPolicy(p)
	}
	n.start()
	return n
}

// TestPolicyPending: a pod started while the agent is down, in a namespace
// where the last policies could select a pod, is closed from its first
// packet (but to the node's own traffic) until the next agent resolves it;
// one in a namespace no policy could select is left open; without the
// table nothing is marked.
func TestPolicyPending(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "y/a", "x/new", "y/new")
	xa, ya, xnew, ynew := l.pod("x/a"), l.pod("y/a"), l.pod("x/new"), l.pod("y/new")
	allowAll := np("x", "allow-all", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{}}})
	// The first agent knows x/a and y/a only.
	n := startAgent(t, l, []*labPod{xa, ya}, allowAll)
	must(t, n.sink.Close()) // the agent goes down

	// The CNI ADDs of x/new and y/new.
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	if marked, err := h.MarkPolicyPending("x", []netip.Addr{xnew.ip}); err != nil || !marked {
		t.Fatalf("MarkPolicyPending(x) = %v, %v; want marked", marked, err)
	}
	if marked, err := h.MarkPolicyPending("y", []netip.Addr{ynew.ip}); err != nil || marked {
		t.Fatalf("MarkPolicyPending(y) = %v, %v; want not marked (no policy in y)", marked, err)
	}
	node := &labPod{ns: "node", name: "node", path: l.nodePath, ip: nodeAddr}
	if connect(t, ya, xnew.ip, policymodel.TCP, 80, denyWait) || connect(t, xnew, ya.ip, policymodel.TCP, 80, denyWait) {
		t.Error("x/new, started while the agent is down, is open")
	}
	if !connect(t, node, xnew.ip, policymodel.TCP, 80, allowWait) {
		t.Error("the node cannot reach pending x/new (its probes must pass)")
	}
	if !connect(t, ya, ynew.ip, policymodel.TCP, 80, allowWait) {
		t.Error("y/new, in a namespace no policy could select, is closed")
	}

	// The next agent learns of every pod: its first sync resolves x/new.
	n2 := newNode(t, l)
	n2.e.SetNetworkPolicy(allowAll)
	n2.start()
	if pend, _, err := h.PolicySetAddrs(nft.PolicyPending); err != nil || len(pend) != 0 {
		t.Errorf("pending after the sync: %v, %v", pend, err)
	}
	l.checkTraffic(t, n2.e.Model())

	// A DEL takes an address out of both sets (twice: already gone is no
	// error); an ADD undone does too.
	_, err = h.MarkPolicyPending("x", []netip.Addr{xnew.ip})
	must(t, err)
	must(t, h.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{xnew.ip}}))
	must(t, h.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{xnew.ip}}))
	if pend, _, _ := h.PolicySetAddrs(nft.PolicyPending); len(pend) != 0 {
		t.Errorf("pending after the DEL: %v", pend)
	}
	if att, _, _ := h.PolicySetAddrs(nft.PolicyAttached); slices.Contains(att, xnew.ip) {
		t.Errorf("attached after the DEL: %v", att)
	}
	_, err = h.MarkPolicyPending("x", []netip.Addr{xnew.ip})
	must(t, err)
	must(t, h.UnmarkPolicyPending([]netip.Addr{xnew.ip}))
	if pend, _, _ := h.PolicySetAddrs(nft.PolicyPending); len(pend) != 0 {
		t.Errorf("pending after the undo: %v", pend)
	}

	// No table: nothing marked, nothing fails.
	other, err := nft.Open(nstest.NewNS(t, "pe"))
	must(t, err)
	defer other.Close()
	if marked, err := other.MarkPolicyPending("x", []netip.Addr{xnew.ip}); err != nil || marked {
		t.Errorf("without the table: MarkPolicyPending = %v, %v", marked, err)
	}
	must(t, other.UnmarkPolicyPending([]netip.Addr{xnew.ip}))
	must(t, other.UnhookPod(nft.PodUnhook{IPs: []netip.Addr{xnew.ip}, Masq: true, CheckedPort: "cbx0"}))
}

// TestPolicyGonePod: a pod of the node that leaves the API before its DEL
// (force-deleted: its containers run until the kubelet kills them) is not
// opened by leaving the sets: its addresses are pending until the DEL. A
// pod whose DEL came first (a graceful deletion) leaves nothing pending,
// and a pod that left the API while the agent was down is closed by the
// next agent's first sync until its DEL.
func TestPolicyGonePod(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "x/b", "x/c", "y/a")
	xa, xb, xc, ya := l.pod("x/a"), l.pod("x/b"), l.pod("x/c"), l.pod("y/a")
	deny := np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})
	n := startAgent(t, l, []*labPod{ya}, deny)
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	addrs := func(p *labPod) []netip.Addr { return []netip.Addr{p.ip, p.ip6} }
	pending := func() []netip.Addr {
		t.Helper()
		pend, _, err := h.PolicySetAddrs(nft.PolicyPending)
		must(t, err)
		return pend
	}
	// The ADDs of x/a, x/b and x/c, then the agent learns of them.
	for _, p := range []*labPod{xa, xb, xc} {
		if marked, err := h.MarkPolicyPending("x", addrs(p)); err != nil || !marked {
			t.Fatalf("MarkPolicyPending(%s) = %v, %v", p.name, marked, err)
		}
		n.do(func(e *policy.Engine) policymodel.Delta { return e.SetPod(p.apiPod(nil)) })
	}
	if p := pending(); len(p) != 0 {
		t.Fatalf("pending once the agent placed the pods: %v", p)
	}
	if connect(t, ya, xa.ip, policymodel.TCP, 80, denyWait) {
		t.Fatal("y/a reaches x/a through a deny-all")
	}

	// x/a is force-deleted: gone from the API, still running.
	n.do(func(e *policy.Engine) policymodel.Delta { return e.DeletePod("x", "a") })
	if connect(t, ya, xa.ip, policymodel.TCP, 80, denyWait) {
		t.Error("force-deleted x/a, still running before its DEL, is open to y/a")
	}
	if p := pending(); !slices.Equal(p, addrs(xa)) {
		t.Errorf("pending after x/a left the API: %v, want its addresses", p)
	}
	must(t, h.UnhookPod(nft.PodUnhook{IPs: addrs(xa)})) // its DEL
	if p := pending(); len(p) != 0 {
		t.Errorf("pending after x/a's DEL: %v", p)
	}

	// x/b is deleted gracefully: its DEL comes before it leaves the API.
	must(t, h.UnhookPod(nft.PodUnhook{IPs: addrs(xb)}))
	n.do(func(e *policy.Engine) policymodel.Delta { return e.DeletePod("x", "b") })
	if p := pending(); len(p) != 0 {
		t.Errorf("pending after x/b's DEL and deletion: %v (nothing will take it out)", p)
	}

	// x/c leaves the API while the agent is down; the next agent closes it.
	must(t, n.sink.Close())
	n2 := startAgent(t, l, []*labPod{ya}, deny)
	defer n2.sink.Close()
	if connect(t, ya, xc.ip, policymodel.TCP, 80, denyWait) {
		t.Error("x/c, gone from the API while the agent was down and not DELed, is open after the next agent's sync")
	}
	must(t, h.UnhookPod(nft.PodUnhook{IPs: addrs(xc)}))
	if p := pending(); len(p) != 0 {
		t.Errorf("pending after x/c's DEL: %v", p)
	}
}
