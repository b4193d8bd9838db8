package policymodel

import (
	"fmt"
	"testing"
)

// TestRuleIDSplit: an ID NewRuleID made splits back into its parts, the
// policy ID's own slashes included; any other string does not split.
func TestRuleIDSplit(t *testing.T) {
	for _, tc := range []struct {
		policy string
		dir    Direction
		index  int
	}{{"np/default/web", Ingress, 0}, {"cnp/deny-all", Egress, 12}, {"mnp/ns/a/b", Egress, 3}} {
		id := NewRuleID(tc.policy, tc.dir, tc.index)
		p, d, i, ok := id.Split()
		if !ok || p != tc.policy || d != tc.dir || i != tc.index {
			t.Errorf("%q.Split() = %q %v %d %v, want %q %v %d", id, p, d, i, ok, tc.policy, tc.dir, tc.index)
		}
	}
	for _, id := range []RuleID{"", "node", "np/x/ingress", "np/x/sideways/0", "np/x/ingress/-1", "np/x/ingress/a", "ingress/0"} {
		if p, d, i, ok := id.Split(); ok {
			t.Errorf("%q.Split() = %q %v %d, want not ok", id, p, d, i)
		}
	}
}

// TestKeys: the isolation and default keys name their direction, and any
// other key (a rule's, CounterInvalid) is a rule's.
func TestKeys(t *testing.T) {
	for _, d := range Directions {
		if k, dir := ParseKey(IsolationKey(d)); k != KeyIsolation || dir != d {
			t.Errorf("ParseKey(%q) = %v %v", IsolationKey(d), k, dir)
		}
		if k, dir := ParseKey(DefaultKey(d)); k != KeyDefault || dir != d {
			t.Errorf("ParseKey(%q) = %v %v", DefaultKey(d), k, dir)
		}
	}
	for _, key := range []string{NewRuleID("np/a/b", Ingress, 0).Key(), CounterInvalid, "iso-xx", "dflt-"} {
		if k, _ := ParseKey(key); k != KeyRule {
			t.Errorf("ParseKey(%q) = %v, want KeyRule", key, k)
		}
	}
	if got := CounterName(IsolationKey(Egress)); got != "c-iso-eg" {
		t.Errorf("CounterName(IsolationKey(Egress)) = %q: the table's existing counter is c-iso-eg", got)
	}
}

// TestSplitPolicyID: namespaced kinds give their namespace; cluster-scoped
// ones keep the slashes of their name.
func TestSplitPolicyID(t *testing.T) {
	for id, want := range map[string][3]string{
		NetworkPolicyID("default", "web"):                      {KindNetworkPolicy, "default", "web"},
		NamespacedPolicyID(KindStagedNetworkPolicy, "ns", "x"): {KindStagedNetworkPolicy, "ns", "x"},
		NamespacedPolicyID(KindMultiNetworkPolicy, "ns", "x"):  {KindMultiNetworkPolicy, "ns", "x"},
		ClusterPolicyID("deny"):                                {KindClusterPolicy, "", "deny"},
		KindStagedClusterPolicy + "/a":                         {KindStagedClusterPolicy, "", "a"},
	} {
		k, ns, n := SplitPolicyID(id)
		if [3]string{k, ns, n} != want {
			t.Errorf("SplitPolicyID(%q) = %q %q %q, want %q", id, k, ns, n, want)
		}
	}
}

// TestWalks: Policies and AllRules take every tier of both directions in
// evaluation order.
func TestWalks(t *testing.T) {
	p := func(id string, n int) *Policy {
		pol := &Policy{ID: id}
		for i := range n {
			pol.Rules = append(pol.Rules, Rule{ID: NewRuleID(id, Ingress, i)})
		}
		return pol
	}
	r := &Rules{
		Ingress: Tiers{Admin: []*Policy{p("a", 1)}, NetworkPolicy: []*Policy{p("n", 2)}, Baseline: []*Policy{p("b", 0)}},
		Egress:  Tiers{Baseline: []*Policy{p("e", 1)}},
	}
	var got []string
	for d, pol := range r.Policies() {
		got = append(got, d.Short()+":"+pol.ID)
	}
	if want := "[in:a in:n in:b eg:e]"; fmt.Sprint(got) != want {
		t.Errorf("Policies: %v, want %s", got, want)
	}
	got = nil
	for pol, rule := range r.AllRules() {
		got = append(got, pol.ID+"="+string(rule.ID))
	}
	if len(got) != 4 || got[0] != "a=a/ingress/0" || got[2] != "n=n/ingress/1" {
		t.Errorf("AllRules: %v", got)
	}
}
