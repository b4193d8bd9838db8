//go:build !nokube

package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/lbipam"
)

// startLBIPAM takes part in the election of the LoadBalancer IPAM
// (--lb-ipam) until ctx ends, on the agent's informer cache (the nodes);
// wait returns once it stopped (giving the Lease up if it held it).
func startLBIPAM(ctx context.Context, f *flags, health *agent.Health, log *slog.Logger) (wait func()) {
	if !f.lb.on {
		return func() {}
	}
	var nets []netip.Prefix
	if len(f.svc.cidrs) > 0 || f.kubeSubnetMgr {
		var err error
		if nets, err = clusterCIDRs(f); err != nil {
			log.Warn("LoadBalancer IPAM: the pods' networks are unknown: only the nodes' pod CIDRs are kept out of the pools", "err", err)
		}
	}
	cfg := lbipam.Config{Cluster: f.cluster(), Cache: f.kube.cache, Log: log, Namespace: f.lb.namespace, Every: f.lb.renew, ClusterNetworks: nets}
	if health != nil && health.Metrics != nil {
		cfg.Register = health.Metrics.Register
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := lbipam.Run(ctx, cfg); err != nil {
			log.Error("LoadBalancer IPAM: stopped", "err", err)
		}
	}()
	return func() { <-done }
}
