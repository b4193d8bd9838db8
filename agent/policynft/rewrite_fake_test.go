package policynft_test

import (
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// The table sides of traffic_test.go's tests of what a change rewrites, on
// the fake kernel (as any user): the rule handles each change keeps, and
// the table after it (checkTable).

// ruleHandles returns a reader of the policy table's rule handles.
func (l *fakeLab) ruleHandles(t *testing.T) func(*testing.T) []string {
	h := l.handle(t)
	return func(t *testing.T) []string {
		t.Helper()
		hs, err := h.PolicyRuleHandles()
		must(t, err)
		return hs
	}
}

// TestPolicyAddRewritesLittleTable: a NetworkPolicy's arrival on a node
// with 40 others rewrites the jumps of its bucket, not one per policy.
func TestPolicyAddRewritesLittleTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "y/a")
	n := newFakeNode(t, l)
	before, after, gone := addRewrites(t, n, l.ruleHandles(t))
	if len(gone) > 12 {
		t.Errorf("a policy's arrival rewrote %d rules of the others: %v", len(gone), gone)
	}
	if len(after) <= len(before) {
		t.Errorf("%d rules after a policy's arrival, %d before: its rules are missing", len(after), len(before))
	}
	checkTable(t, l, n.e.Model())
}

// TestPolicyChangeRewritesItsChainsTable: a policy's change rewrites its
// own chains; another policy's keep their rule handles.
func TestPolicyChangeRewritesItsChainsTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b", "y/a")
	n := newFakeNode(t, l)
	db := np("x", "db", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}}}}})
	n.e.SetNetworkPolicy(web(80))
	n.e.SetNetworkPolicy(db)
	n.start()
	handles := l.ruleHandles(t)
	of := func(chain string) []string {
		var out []string
		for _, r := range handles(t) {
			if strings.HasPrefix(r, chain+":") {
				out = append(out, r)
			}
		}
		return out
	}
	dbChain, webChain := "n-"+policymodel.ChainID("np/x/db")+"-in4", "n-"+policymodel.ChainID("np/x/web")+"-in4"
	dbBefore, webBefore := of(dbChain), of(webChain)
	if len(dbBefore) == 0 || len(webBefore) == 0 {
		t.Fatalf("no rules in %s (%v) or %s (%v)", dbChain, dbBefore, webChain, webBefore)
	}
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(81)) })
	if got := of(dbChain); !slices.Equal(got, dbBefore) {
		t.Errorf("np/x/db's rules rewritten: %v, before %v", got, dbBefore)
	}
	if got := of(webChain); slices.Equal(got, webBefore) {
		t.Errorf("np/x/web's rules not rewritten: %v", got)
	}
	checkTable(t, l, n.e.Model())
}

// TestPolicyDeltaElementsOnlyTable: a pod's arrival, departure and label
// change change set elements only (every rule keeps its handle); the
// change that takes a policy's last subject off the node takes the policy
// out of the table.
func TestPolicyDeltaElementsOnlyTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b", "y/a")
	n := newFakeNode(t, l)
	n.do(func(e *policy.Engine) policymodel.Delta {
		return e.SetNetworkPolicy(np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("role", "client")}},
		}}}))
	})
	n.start()
	handles := l.ruleHandles(t)
	before := handles(t)
	xb, xa := l.pod("x/b"), l.pod("x/a")
	for _, s := range []struct {
		name   string
		change func(*policy.Engine) policymodel.Delta
		rules  bool // the policy leaves the node's table
	}{
		{"x/b labelled role=client", func(e *policy.Engine) policymodel.Delta {
			return e.SetPod(xb.apiPod(map[string]string{"app": "b", "role": "client"}))
		}, false},
		{"x/b gone", func(e *policy.Engine) policymodel.Delta { return e.DeletePod("x", "b") }, false},
		{"x/b back without the label", func(e *policy.Engine) policymodel.Delta { return e.SetPod(xb.apiPod(nil)) }, false},
		{"x/a relabelled: no longer selected", func(e *policy.Engine) policymodel.Delta {
			return e.SetPod(xa.apiPod(map[string]string{"app": "other"}))
		}, true},
	} {
		t.Run(s.name, func(t *testing.T) {
			n.t = t
			d := s.change(n.e)
			if d.Rules != s.rules {
				t.Fatalf("delta changes the rules: %v, want %v: %+v", d.Rules, s.rules, d)
			}
			must(t, n.sink.Apply(n.e.Model(), d))
			if after := handles(t); !s.rules && !slices.Equal(before, after) {
				t.Errorf("rule handles changed:\nbefore %v\nafter  %v", before, after)
			}
			checkTable(t, l, n.e.Model())
		})
	}
}

// TestPolicyTableGoneUnderItTable: someone removes the table under the
// agent's Handle (which remembers it between transactions); the next
// change fails on what it remembered and the Sink's full sync puts the
// whole table back.
func TestPolicyTableGoneUnderItTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b", "y/a")
	n := newFakeNode(t, l)
	n.e.SetNetworkPolicy(web(80))
	n.start()
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(81)) }) // the Handle now knows the table
	other := l.handle(t)
	must(t, other.DeletePolicy())
	if got := policyTable(l.k); got != "" {
		t.Fatalf("the policy table after DeletePolicy:\n%s", got)
	}
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(web(80)) })
	checkTable(t, l, n.e.Model())
}

// TestPolicySelectorChangeTable: a policy that keeps its name and rules
// but selects other pods (its subject set changes) has the jump to its
// chain rewritten in its bucket's chain (made from its policies' subjects
// and chains: policy_rules.go), both directions; the table after each
// change is the model's.
func TestPolicySelectorChangeTable(t *testing.T) {
	t.Parallel()
	l := newFakeLab("x/a", "x/b", "y/a")
	n := newFakeNode(t, l)
	pol := func(app string) *networkingv1.NetworkPolicy {
		return np("x", "web", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", app),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80)}}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{port(tcp, 53)}}}})
	}
	n.e.SetNetworkPolicy(pol("a"))
	n.start()
	checkTable(t, l, n.e.Model())
	for _, app := range []string{"b", "a"} {
		n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(pol(app)) })
		checkTable(t, l, n.e.Model())
	}
}
