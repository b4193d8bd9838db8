//go:build !nokube

package addrhold

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricNames: a feature's metrics keep the names its dashboards read
// (cnibox_agent_egress_*, cnibox_agent_lb_*), and Took counts a takeover.
func TestMetricNames(t *testing.T) {
	m := NewMetrics(MetricNames{Subsystem: "lb", Held: "addresses_announced", HeldHelp: "h", TakeoversHelp: "t", TakeoverHelp: "s", FailsHelp: "f"})
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	m.Took(time.Now().Add(-2 * time.Second))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
		if f.GetName() == "cnibox_agent_lb_takeovers_total" && f.GetMetric()[0].GetCounter().GetValue() != 1 {
			t.Errorf("takeovers_total = %v after one Took, want 1", f.GetMetric()[0].GetCounter().GetValue())
		}
	}
	want := []string{"cnibox_agent_lb_addresses_announced", "cnibox_agent_lb_lease_write_failures_total",
		"cnibox_agent_lb_takeover_seconds", "cnibox_agent_lb_takeovers_total"}
	if !slices.Equal(names, want) {
		t.Errorf("metric names %v, want %v", names, want)
	}
}
