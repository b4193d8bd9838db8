//go:build !nokube

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/fqdn"
	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// The agent's Syncer keeps the models handed to it and commits on its own
// goroutine (syncer.go).
var _ policy.Handoff = (*policynft.Syncer)(nil)

// admitter hands the pod API's policy operations (a pod's ADD placing it
// at once) to the watcher once it runs: the pod API starts first.
var admitter = policy.NewAdmitter()

// startPolicy starts the NetworkPolicy watcher on the policy tables'
// Syncer until ctx ends (--network-policy, on by default), or removes the policy table
// when the flag is off. The table is never removed on the way out: while
// the agent is away the kernel keeps enforcing the last rules, and the next
// agent replaces them in one transaction once its informers have synced.
func startPolicy(ctx context.Context, f *flags, health *agent.Health, log *slog.Logger) error {
	if !f.networkPolicy {
		syncer, err := policynft.New("")
		if err != nil {
			return fmt.Errorf("network policy: %w", err)
		}
		defer syncer.Close()
		if err := syncer.Remove(); err != nil {
			return fmt.Errorf("--network-policy=false: %w", err)
		}
		if _, err := startDNSProxy(f, nil, log); err != nil { // removes the DNS table
			return fmt.Errorf("--network-policy=false: %w", err)
		}
		return nil
	}
	syncer, err := policySyncer(ctx, f, log)
	if err != nil {
		return fmt.Errorf("network policy: %w", err)
	}
	if health != nil {
		if err := health.Metrics.Register(syncer); err != nil {
			return fmt.Errorf("network policy metrics: %w", err)
		}
	}
	syncer.IndexTo(f.dataDir)
	bridgedTrafficFiltered(log)
	stopDNS, err := startDNSProxy(f, syncer, log)
	if err != nil {
		return err
	}
	if _, _, err := policy.ParseDNSService(f.dnsService); err != nil {
		stopDNS()
		return fmt.Errorf("--dns-service %w", err)
	}
	cfg := policy.WatchConfig{
		Cluster: f.cluster(), Cache: f.kube.cache, Log: log, Syncer: syncer,
		// domainNames: the resolvers the DNS proxy learns from
		DomainNames: f.clusterNetworkPolicies && f.dnsProxyPort != 0,
		DNSService:  f.dnsService, DNSResolvers: f.dnsResolvers,
		NodeAddrs:              nodeAddrs(log),
		ClusterNetworkPolicies: f.clusterNetworkPolicies,
		Admitter:               admitter,
		// Every pod of the cluster listed and decoded: return what that
		// left behind (at 20,000 pods the heap in use was 38 MiB of an
		// 82 MiB anonymous RSS before this).
		Synced: func() { releaseStartPages(log) },
	}
	if f.svc.proxy {
		cfg.ServiceOf = serviceOf // the flow log names a Service's connections
	}
	if err := flowLogTo(&cfg, f, log); err != nil {
		stopDNS()
		return err
	}
	if health != nil && cfg.FlowLog != nil {
		cfg.FlowLogCounts = &loggedflows.Counts{}
		if err := health.Metrics.Register(cfg.FlowLogCounts); err != nil {
			stopDNS()
			return fmt.Errorf("flow log metrics: %w", err)
		}
	}
	go func() {
		defer stopDNS()
		if cfg.FlowLog != nil {
			defer cfg.FlowLog.(*lazyFlowLog).Close()
		}
		if err := policy.Watch(ctx, cfg); err != nil && ctx.Err() == nil {
			log.Error("network policy watcher stopped; the kernel keeps the last rules", "err", err)
		}
	}()
	return nil
}

// flowLogTo sets the flow log of cfg from the flags (docs/flowlog.md): a
// bad --flow-log is an error; the file is opened with the first record
// (lazyFlowLog).
func flowLogTo(cfg *policy.WatchConfig, f *flags, log *slog.Logger) error {
	all, ok := policy.ParseFlowLogSetting(f.flowLog)
	if !ok {
		return fmt.Errorf("--flow-log %q: use allow, deny or allow,deny", f.flowLog)
	}
	if f.flowLogFile == "" {
		if all.Allow || all.Deny {
			return fmt.Errorf("--flow-log %q with an empty --flow-log-file: name the file, or leave --flow-log empty", f.flowLog)
		}
		return nil
	}
	node, _ := kubecore.NodeName(f.nodeName, "flow log")
	cfg.FlowLog = &lazyFlowLog{log: log, o: flowlog.Options{Path: f.flowLogFile, Node: node, MaxSize: int64(f.flowLogMaxSize) << 20,
		MaxFiles: f.flowLogMaxFiles, Rate: float64(f.flowLogRate), Burst: 5 * max(f.flowLogRate, 1)}}
	cfg.FlowLogAll = all
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

// startDNSProxy starts the DNS proxy of the domainNames peers (agent/fqdn:
// the pods a policy with one selects have their DNS sent to it, and what
// they resolve for the peer's names is allowed for its TTL) when
// ClusterNetworkPolicies are on and --dns-proxy-port is not 0: its
// transparent listeners, then the policy routing and the DNS table that
// send it the queries. Otherwise what an earlier agent set up for it is
// removed. stop closes the proxy; the table and the routing stay (the
// next agent's proxy takes over the port).
func startDNSProxy(f *flags, syncer *policynft.Syncer, log *slog.Logger) (stop func(), err error) {
	h, err := netops.Open("")
	if err != nil {
		return nil, fmt.Errorf("domainNames: %w", err)
	}
	defer h.Close()
	if !f.networkPolicy || !f.clusterNetworkPolicies || f.dnsProxyPort == 0 {
		err := errors.Join(h.NFT().DeleteDNSRedirect(), h.DeleteMarkLocal(netops.DNSMarkLocal))
		if err != nil {
			return nil, fmt.Errorf("domainNames off: remove the DNS table and its routing: %w", err)
		}
		return func() {}, nil
	}
	dns, err := policynft.NewDNS("")
	if err != nil {
		return nil, fmt.Errorf("domainNames: %w", err)
	}
	port := uint16(f.dnsProxyPort)
	cfg := fqdn.DefaultConfig
	cfg.Port4, cfg.Port6, cfg.Permit, cfg.Learn, cfg.Log = port, port, dns.Permit, dns.Learn, log
	proxy, err := fqdn.Listen(cfg)
	if err != nil {
		dns.Close()
		return nil, fmt.Errorf("domainNames: the DNS proxy on port %d (--dns-proxy-port): %w", port, err)
	}
	if err := h.EnsureMarkLocal(netops.DNSMarkLocal); err != nil {
		proxy.Close()
		dns.Close()
		return nil, fmt.Errorf("domainNames: the DNS proxy's routing: %w", err)
	}
	if _, err := h.NFT().EnsureDNSRedirect(nft.DNSRedirect{Port4: port, Port6: port}); err != nil {
		proxy.Close()
		dns.Close()
		return nil, fmt.Errorf("domainNames: the DNS table: %w", err)
	}
	syncer.WithDNS(dns)
	log.Info("domainNames: the DNS proxy listens", "port", port)
	return func() {
		proxy.Close()
		dns.Close()
	}, nil
}
