package loggedflows

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCounts: the metrics count each verdict by its policy, and the lost.
func TestCounts(t *testing.T) {
	var c Counts
	for range 3 {
		c.Add(Key{Verdict: "deny", Kind: "NetworkPolicy", Namespace: "x"})
	}
	c.Add(Key{Verdict: "allow", Kind: "ClusterNetworkPolicy", Name: "dns"})
	c.SetLost(7)
	want := `
# HELP cnibox_agent_flow_log_connections_total Policy verdicts the flow log logged (before its rate limit), by verdict and deciding policy.
# TYPE cnibox_agent_flow_log_connections_total counter
cnibox_agent_flow_log_connections_total{kind="ClusterNetworkPolicy",namespace="",policy="dns",verdict="allow"} 1
cnibox_agent_flow_log_connections_total{kind="NetworkPolicy",namespace="x",policy="",verdict="deny"} 3
# HELP cnibox_agent_flow_log_lost_total Logged verdicts lost before the agent read them (the kernel's buffer or the reader's queue full).
# TYPE cnibox_agent_flow_log_lost_total counter
cnibox_agent_flow_log_lost_total 7
`
	if err := testutil.CollectAndCompare(&c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
