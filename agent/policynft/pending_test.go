package policynft_test

import (
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPolicyPending: a pod started while the agent is down, in a namespace
// where the last policies could select a pod, is closed from its first
// packet (but to the node's own traffic) until the next agent resolves it;
// one in a namespace no policy could select is left open; without the
// table nothing is marked.
func TestPolicyPending(t *testing.T) {
	l := newLab(t, "x/a", "y/a", "x/new", "y/new")
	xa, ya, xnew, ynew := l.pod("x/a"), l.pod("y/a"), l.pod("x/new"), l.pod("y/new")
	allowAll := np("x", "allow-all", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{}}})
	// The first agent knows x/a and y/a only.
	n := &node{t: t, e: policy.NewEngine("n1")}
	var err error
	n.sink, err = policynft.New(l.nodePath)
	must(t, err)
	n.e.SetNodeAddrs([]netip.Addr{nodeAddr, nodeAddr6})
	for _, ns := range []string{"x", "y"} {
		n.e.SetNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
	}
	n.e.SetPod(xa.apiPod(nil))
	n.e.SetPod(ya.apiPod(nil))
	n.e.SetNetworkPolicy(allowAll)
	n.start()
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
	if connect(t, ya, xnew.ip, policy.TCP, 80) || connect(t, xnew, ya.ip, policy.TCP, 80) {
		t.Error("x/new, started while the agent is down, is open")
	}
	if !connect(t, node, xnew.ip, policy.TCP, 80) {
		t.Error("the node cannot reach pending x/new (its probes must pass)")
	}
	if !connect(t, ya, ynew.ip, policy.TCP, 80) {
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

	// A DEL takes an address out (twice: already gone is no error).
	_, err = h.MarkPolicyPending("x", []netip.Addr{xnew.ip})
	must(t, err)
	must(t, h.UnmarkPolicyPending([]netip.Addr{xnew.ip}))
	must(t, h.UnmarkPolicyPending([]netip.Addr{xnew.ip}))
	if pend, _, _ := h.PolicySetAddrs(nft.PolicyPending); len(pend) != 0 {
		t.Errorf("pending after unmark: %v", pend)
	}

	// No table: nothing marked, nothing fails.
	other, err := nft.Open(nstest.NewNS(t, "pe"))
	must(t, err)
	defer other.Close()
	if marked, err := other.MarkPolicyPending("x", []netip.Addr{xnew.ip}); err != nil || marked {
		t.Errorf("without the table: MarkPolicyPending = %v, %v", marked, err)
	}
	must(t, other.UnmarkPolicyPending([]netip.Addr{xnew.ip}))
}
