//go:build !nokube

package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/egress"
	"github.com/cnibox/cnibox/netops"
)

// startEgress serves EgressGateways beside the overlay (--kube-subnet-mgr;
// no flag: egress.Run waits until the API serves their CRD) until ctx
// ends; wait returns once it has released what this node held.
func startEgress(ctx context.Context, f *flags, health *agent.Health, networks []netip.Prefix, log *slog.Logger) (wait func()) {
	return onHost(log, "egress gateways", "not serving them", func(h *netops.Handle) error {
		return egress.Run(ctx, egress.Config{
			Cluster: f.cluster(), Cache: f.kube.cache, Log: log, Host: h, DataDir: f.dataDir,
			Namespace: egress.LeaseNamespace, Register: registerer(health),
			Overlay: func() (string, []netip.Prefix, bool) {
				return overlayUplink(f.dataDir, networks)
			},
		})
	})
}

// onHost runs run, on a goroutine of its own, with a handle of the node's
// network namespace; wait returns once run has. It logs run's error, and
// what (which starts the log lines) does without when the namespace
// cannot be opened.
func onHost(log *slog.Logger, what, without string, run func(h *netops.Handle) error) (wait func()) {
	h, err := netops.Open("")
	if err != nil {
		log.Error(what+": cannot open the node's network namespace; "+without, "err", err)
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer h.Close()
		if err := run(h); err != nil {
			log.Error(what+": stopped", "err", err)
		}
	}()
	return func() { <-done }
}

// registerer is the metrics' registration of health (nil without).
func registerer(health *agent.Health) func(prometheus.Collector) error {
	if health == nil || health.Metrics == nil {
		return nil
	}
	return health.Metrics.Register
}
