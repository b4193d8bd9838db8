package policynft_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/store"
)

// TestPolicyMetricsAndIndex: a Deny rule's drops show in the Sink's metrics
// under the policy and rule, and the store's index names the rule's
// counter.
func TestPolicyMetricsAndIndex(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "y/a")
	xa, ya := l.pod("x/a"), l.pod("y/a")
	n := newNode(t, l)
	dir := t.TempDir()
	n.sink.IndexTo(dir)
	n.e.SetClusterNetworkPolicy(cnp("deny-y", cnpv1.AdminTier, 1, "x", []cnpv1.ClusterNetworkPolicyIngressRule{
		fromNS(cnpv1.ClusterNetworkPolicyRuleActionDeny, "y")}))
	n.start()
	if connect(t, ya, xa.ip, policymodel.TCP, 80, denyWait) {
		t.Fatal("y/a reaches x/a through a Deny")
	}
	reg := prometheus.NewRegistry()
	must(t, reg.Register(n.sink))
	mfs, err := reg.Gather()
	must(t, err)
	var drops float64
	for _, mf := range mfs {
		if mf.GetName() != "cnibox_agent_policy_drops_packets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["policy"] == "cnp/deny-y" && labels["rule"] == "cnp/deny-y/ingress/0" {
				drops = m.GetCounter().GetValue()
			}
		}
	}
	if drops < 1 {
		t.Errorf("drops of cnp/deny-y = %v, want >= 1 (the SYN)", drops)
	}
	st, err := store.Open(dir)
	must(t, err)
	defer st.Close()
	idx, found, err := st.PolicyIndex()
	must(t, err)
	if !found || idx.Rules == nil || len(idx.Rules.Ingress.Admin) != 1 || idx.Rules.Ingress.Admin[0].ID != "cnp/deny-y" ||
		idx.Rules.Ingress.Admin[0].Rules[0].Action != policymodel.Deny {
		t.Errorf("index %+v (found %v)", idx, found)
	}
}
