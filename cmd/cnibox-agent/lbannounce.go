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
// it has released what it held. networks are the cluster's
// (overlayNetworks): the announcer starts once the overlay holds its
// lease on them.
func startLBAnnounce(ctx context.Context, f *flags, health *agent.Health, networks []netip.Prefix, log *slog.Logger) (wait func()) {
	if !f.lb.announce {
		return func() {}
	}
	return onHost(log, "load balancer announcements", "not announcing", func(h *netops.Handle) error {
		return lbannounce.Run(ctx, lbannounce.Config{
			Cluster: f.cluster(), Cache: f.kube.cache, Log: log, Host: h, DataDir: f.dataDir, Namespace: f.lb.announceNS,
			Register: registerer(health),
			Overlay: func() (string, bool) {
				uplink, _, ok := overlayUplink(f.dataDir, networks)
				return uplink, ok
			},
		})
	})
}
