//go:build !nokube

package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/egress"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// startEgress serves EgressGateways beside the overlay (--kube-subnet-mgr;
// no flag: egress.Run waits until the API serves their CRD) until ctx
// ends; wait returns once it has released what this node held.
func startEgress(ctx context.Context, f *flags, health *agent.Health, networks []netip.Prefix, log *slog.Logger) (wait func()) {
	done := make(chan struct{})
	h, err := netops.Open("")
	if err != nil {
		log.Error("egress gateways: cannot open the node's network namespace; not serving them", "err", err)
		close(done)
		return func() {}
	}
	cfg := egress.Config{
		Cluster: f.cluster(), Cache: f.kube.cache, Log: log, Host: h, DataDir: f.dataDir,
		Namespace: egress.LeaseNamespace,
		Overlay: func() (string, []netip.Prefix, bool) {
			return overlayUplink(f.dataDir, networks)
		},
	}
	if health != nil && health.Metrics != nil {
		cfg.Register = health.Metrics.Register
	}
	go func() {
		defer close(done)
		defer h.Close()
		if err := egress.Run(ctx, cfg); err != nil {
			log.Error("egress gateways: stopped", "err", err)
		}
	}()
	return func() { <-done }
}

// overlayUplink reads the overlay agent's record for its uplink, once it
// holds its lease; the cluster networks are networks (the IPv4 one first,
// required; the IPv6 one in a dual-stack cluster; none: no egress).
func overlayUplink(dataDir string, networks []netip.Prefix) (string, []netip.Prefix, bool) {
	if len(networks) == 0 || !networks[0].IsValid() || !networks[0].Addr().Is4() {
		return "", nil, false
	}
	var masked []netip.Prefix
	for _, n := range networks {
		if n.IsValid() {
			masked = append(masked, n.Masked())
		}
	}
	s, err := store.OpenWith(store.Dir(dataDir), store.Options{NoCreate: true})
	if err != nil {
		return "", nil, false
	}
	defer s.Close()
	states, err := s.Overlays()
	if err != nil {
		return "", nil, false
	}
	for _, st := range states {
		if st.Ready && !st.Stopped && st.Lease.Iface != "" {
			return st.Lease.Iface, masked, true
		}
	}
	return "", nil, false
}
