//go:build !nokube

package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/lbannounce"
	"github.com/cnibox/cnibox/netops"
)

// startLBAnnounce answers on the LAN for the LoadBalancer addresses this
// node is elected for (--lb-announce) until ctx ends; wait returns once
// it has released what it held.
func startLBAnnounce(ctx context.Context, f *flags, health *agent.Health, network netip.Prefix, log *slog.Logger) (wait func()) {
	if !f.lb.announce {
		return func() {}
	}
	done := make(chan struct{})
	h, err := netops.Open("")
	if err != nil {
		log.Error("load balancer announcements: cannot open the node's network namespace; not announcing", "err", err)
		close(done)
		return func() {}
	}
	cfg := lbannounce.Config{
		Cluster: f.cluster(), Cache: f.kube.cache, Log: log, Host: h, DataDir: f.dataDir, Namespace: f.lb.announceNS,
		Overlay: func() (string, bool) {
			uplink, _, ok := overlayUplink(f.dataDir, []netip.Prefix{network})
			return uplink, ok
		},
	}
	if health != nil && health.Metrics != nil {
		cfg.Register = health.Metrics.Register
	}
	go func() {
		defer close(done)
		defer h.Close()
		if err := lbannounce.Run(ctx, cfg); err != nil {
			log.Error("load balancer announcements: stopped", "err", err)
		}
	}()
	return func() { <-done }
}
