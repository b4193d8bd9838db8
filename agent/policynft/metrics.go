package policynft

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// ruleInfo is what a counter of the table counts.
type ruleInfo struct {
	policy, rule string
	drops        bool // a Deny rule's counter counts drops
}

// noteRules records, for the metrics, which counter belongs to which
// policy (called with s.mu held).
func (s *Syncer) noteRules(r *policymodel.Rules) {
	s.rules = map[string]ruleInfo{}
	for p, r := range r.AllRules() {
		s.rules[policymodel.CounterName(r.ID.Key())] = ruleInfo{policy: p.ID, rule: string(r.ID), drops: r.Action == policymodel.Deny}
	}
}

var (
	descRules   = prometheus.NewDesc("cnibox_agent_policy_rules", "NetworkPolicy and ClusterNetworkPolicy rules in the node's policy table.", nil, nil)
	descSets    = prometheus.NewDesc("cnibox_agent_policy_sets", "Address sets of the node's policy model (each is an nftables set per family).", nil, nil)
	descSync    = prometheus.NewDesc("cnibox_agent_policy_sync_seconds", "How long the last transaction on the policy table took.", nil, nil)
	descApplied = prometheus.NewDesc("cnibox_agent_policy_transactions_total", "Transactions on the policy table, by result (ok, failed).", []string{"result"}, nil)
	descChanges = prometheus.NewDesc("cnibox_agent_policy_changes_total", "Changes of the policy model handed to the policy table's syncer (queued ones are committed together).", nil, nil)
	descResyncs = prometheus.NewDesc("cnibox_agent_policy_resyncs_total", "Periodic full syncs of the policy table (--policy-resync).", nil, nil)
	descPods    = prometheus.NewDesc("cnibox_agent_mnp_table_writes_total", "Writes of the pods' MultiNetworkPolicy tables, by result (ok, failed).", []string{"result"}, nil)
	descDrops   = prometheus.NewDesc("cnibox_agent_policy_drops_packets_total",
		"Packets dropped by the policy table: by a Deny rule (policy, rule), by a NetworkPolicy's isolation (policy \"isolation\", rule ingress or egress), or while the pod was pending (policy \"pending\").",
		[]string{"policy", "rule"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Syncer) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRules, descSets, descSync, descApplied, descChanges, descResyncs, descPods, descDrops} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the drops are read from the
// table's counters at each scrape.
func (s *Syncer) Collect(ch chan<- prometheus.Metric) {
	s.qmu.Lock()
	changes := s.q.n
	s.qmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descRules, prometheus.GaugeValue, float64(s.stats.Rules))
	ch <- prometheus.MustNewConstMetric(descSets, prometheus.GaugeValue, float64(s.stats.Sets))
	ch <- prometheus.MustNewConstMetric(descSync, prometheus.GaugeValue, s.stats.LastSync.Seconds())
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(s.stats.Applied), "ok")
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(s.stats.Failed), "failed")
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(changes))
	ch <- prometheus.MustNewConstMetric(descResyncs, prometheus.CounterValue, float64(s.stats.Resyncs))
	ch <- prometheus.MustNewConstMetric(descPods, prometheus.CounterValue, float64(s.stats.PodTables), "ok")
	ch <- prometheus.MustNewConstMetric(descPods, prometheus.CounterValue, float64(s.stats.PodFailed), "failed")
	counters, err := s.h.PolicyCounters()
	if err != nil {
		return
	}
	fixed := map[string][2]string{
		policymodel.CounterName(policymodel.IsolationKey(policymodel.Ingress)): {"isolation", "ingress"},
		policymodel.CounterName(policymodel.IsolationKey(policymodel.Egress)):  {"isolation", "egress"},
		policymodel.CounterName(policymodel.CounterPending):                    {"pending", ""},
		policymodel.CounterName(policymodel.CounterInvalid):                    {policymodel.CounterInvalid, ""},
		// IPv6 link-local on the forward hook (netops/nft policy_linklocal.go)
		policymodel.CounterName(policymodel.CounterLinkLocal): {"link-local", ""},
	}
	for name, c := range counters {
		if f, ok := fixed[name]; ok {
			ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(c.Packets), f[0], f[1])
		} else if r, ok := s.rules[name]; ok && r.drops {
			ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(c.Packets), r.policy, r.rule)
		}
	}
}
