//go:build !nokube

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/netops"
)

// The agent's Sink commits on its own goroutine (policy.Watch starts its
// Run once the first full sync is in).
var _ policy.Syncer = (*policynft.Sink)(nil)

// startPolicy starts the NetworkPolicy watcher and its nftables Sink until
// ctx ends (--network-policy, on by default), or removes the policy table
// when the flag is off. The table is never removed on the way out: while
// the agent is away the kernel keeps enforcing the last rules, and the next
// agent replaces them in one transaction once its informers have synced.
func startPolicy(ctx context.Context, f *flags, health *agent.Health, log *slog.Logger) error {
	sink, err := policynft.New("")
	if err != nil {
		return fmt.Errorf("network policy: %w", err)
	}
	if !f.networkPolicy {
		defer sink.Close()
		if err := sink.Remove(); err != nil {
			return fmt.Errorf("--network-policy=false: %w", err)
		}
		return nil
	}
	if health != nil {
		if err := health.Metrics.Register(sink); err != nil {
			sink.Close()
			return fmt.Errorf("network policy metrics: %w", err)
		}
	}
	sink.IndexTo(f.dataDir)
	sink.ResyncEvery(time.Duration(f.policyResync) * time.Second)
	bridgedTrafficFiltered(log)
	cfg := policy.WatchConfig{
		Cluster: f.cluster(), Log: log, Sink: sink,
		NodeAddrs:              nodeAddrs(log),
		ClusterNetworkPolicies: f.clusterNetworkPolicies,
		// Every pod of the cluster listed and decoded: return what that
		// left behind (at 20,000 pods the heap in use was 38 MiB of an
		// 82 MiB anonymous RSS before this).
		Synced: func() { releaseStartPages(log) },
	}
	go func() {
		defer sink.Close()
		if err := policy.Watch(ctx, cfg); err != nil && ctx.Err() == nil {
			log.Error("network policy watcher stopped; the kernel keeps the last rules", "err", err)
		}
	}()
	return nil
}

// nodeAddrs are the node's own addresses (of every interface): traffic
// from them to the node's pods (the kubelet's probes) is always allowed.
func nodeAddrs(log *slog.Logger) []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		log.Warn("network policy: the node's addresses", "err", err)
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// bridgedTrafficFiltered turns br_netfilter's bridge-nf-call-iptables (and
// ip6tables) on: traffic between two pods of one bridge then meets the
// forward hook where the policy table judges it, as kube-proxy and
// kube-router require too. Without br_netfilter it is logged: such traffic
// is not policed.
func bridgedTrafficFiltered(log *slog.Logger) {
	h, err := netops.Open("")
	if err == nil {
		defer h.Close()
		err = h.SetSysctls(
			netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"},
			netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-ip6tables", Value: "1"},
		)
	}
	if err != nil {
		log.Warn("network policy: traffic between pods of one bridge is not policed without br_netfilter (modprobe br_netfilter)", "err", err)
	}
}
