//go:build !nokube

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/agent/services"
	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// newServicesTable makes the services tables (cnibox-services and its shards) on
// the node's handle: its nftables side, and its conntrack side for the UDP
// and SCTP entries of endpoints that left (kube-proxy's conntrack
// cleanup).
func newServicesTable(h *netops.Handle) services.Table {
	return nft.NewServices(h.NFT(), nft.ServicesOptions{ClearConntrack: func(gone []netip.AddrPort) error {
		_, err := h.DeleteConntrackTo(gone)
		return err
	}})
}

// validateNodePortAddresses checks --nodeport-addresses.
func validateNodePortAddresses(s string) error {
	_, err := services.ParseNodePortAddresses(s)
	return err
}

// servedServices is the snapshot the services table holds (the proxy's
// last sync), from which the flow log names the Service a connection went
// to (serviceOf).
var servedServices atomic.Pointer[svcmodel.Snapshot]

// serviceOf names the Service port the frontend is (policy's
// ServiceNamer), from the proxy's last sync.
func serviceOf(proto uint8, frontend netip.AddrPort) (svcmodel.PortName, bool) {
	p, ok := map[uint8]svcmodel.Proto{6: svcmodel.TCP, 17: svcmodel.UDP, 132: svcmodel.SCTP}[proto]
	if !ok {
		return svcmodel.PortName{}, false
	}
	return servedServices.Load().FrontendOf(p, frontend)
}

// startServices serves the cluster's Services from the services table
// (--service-proxy) until ctx ends, beside the agent's other Kubernetes
// features on the same informer cache; kube-proxy's /healthz and /livez
// are then health's, and its metrics in health's registry. Off, it
// removes the table an earlier agent left, unless it does no kernel work
// (noKernel: the table is then another agent's). wait returns once the proxy
// stopped; the table stays as its last sync left it (the next agent
// takes it over). done is closed when the proxy stops, after the
// proxy's error if it failed (ctx's end is no error). With
// --service-proxy-only the agent is ready once the first sync is in.
func startServices(ctx context.Context, f *flags, health *agent.Health, log *slog.Logger) (wait func(), done <-chan error, err error) {
	if !f.svc.proxy {
		if f.noKernel() {
			return func() {}, nil, nil
		}
		h, err := netops.Open("")
		if err != nil {
			return nil, nil, fmt.Errorf("--service-proxy=false: %w", err)
		}
		defer h.Close()
		if err := newServicesTable(h).Delete(); err != nil {
			return nil, nil, fmt.Errorf("--service-proxy=false: remove the services table: %w", err)
		}
		return func() {}, nil, nil
	}
	cidrs, err := clusterCIDRs(f)
	if err != nil {
		return nil, nil, err
	}
	npa, err := services.ParseNodePortAddresses(f.svc.nodePortAddresses)
	if err != nil {
		return nil, nil, err
	}
	h, err := netops.Open("")
	if err != nil {
		return nil, nil, fmt.Errorf("--service-proxy: %w", err)
	}
	setConntrackTimeouts(h, f, log)
	kp := kubeProxyLeftovers{h: h.NFT(), cleanup: f.svc.cleanupKubeProxy, log: log}
	cfg := services.WatchConfig{
		Cache: f.kube.cache, Table: newServicesTable(h), Resync: f.svc.resync,
		NodePorts: npa, IfaceAddrs: func() ([]netip.Addr, error) { return ifaceAddrs(h) },
		ClusterCIDRs: cidrs, Health: services.NewProxyHealth(f.svc.resync), Metrics: services.NewMetrics(), Log: log,
		Synced: func(snap *svcmodel.Snapshot, full bool) {
			servedServices.Store(snap) // the flow log's Service names
			if f.svc.only {
				health.SetReady(true)
			}
			if full { // (the syncer's goroutine: h is not used elsewhere meanwhile)
				kp.check()
			}
		},
	}
	if health != nil {
		health.SetProxy(cfg.Health)
		if err := cfg.Metrics.Register(health.Metrics.Register); err != nil {
			h.Close()
			return nil, nil, fmt.Errorf("--service-proxy metrics: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() {
		defer close(stopped)
		defer h.Close()
		if err := services.Watch(ctx, cfg); err != nil && ctx.Err() == nil {
			log.Error("services: the proxy stopped; the kernel keeps the last services table", "err", err)
			stopped <- err
		}
	}()
	log.Info("services: serving Services", "cluster-cidr", cidrs, "nodeport-addresses", npa.String(), "resync", f.svc.resync,
		"proxy-only", f.svc.only, "cleanup-kube-proxy", f.svc.cleanupKubeProxy)
	return func() {
		cancel()
		for range stopped {
		}
	}, stopped, nil
}

// clusterCIDRs are --cluster-cidr, else net-conf.json's networks with
// --kube-subnet-mgr.
func clusterCIDRs(f *flags) ([]netip.Prefix, error) {
	if len(f.svc.cidrs) > 0 {
		return f.svc.cidrs, nil
	}
	if !f.kubeSubnetMgr {
		return nil, errors.New("--service-proxy: the pods' networks are unknown without --kube-subnet-mgr: give --cluster-cidr")
	}
	b, err := os.ReadFile(f.netConfPath)
	if err != nil {
		return nil, fmt.Errorf("--service-proxy: the pods' networks: --net-config-path: %w (or give --cluster-cidr)", err)
	}
	c, err := netconf.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("--service-proxy: the pods' networks: --net-config-path %s: %w", f.netConfPath, err)
	}
	var out []netip.Prefix
	if c.EnableIPv4 && c.Network.IsValid() {
		out = append(out, c.Network.Masked())
	}
	if c.EnableIPv6 && c.IPv6Network.IsValid() {
		out = append(out, c.IPv6Network.Masked())
	}
	return out, nil
}

// ifaceAddrs are the addresses of the node's interfaces.
func ifaceAddrs(h *netops.Handle) ([]netip.Addr, error) {
	ps, err := h.Addrs("")
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Addr())
	}
	return out, nil
}

// setConntrackTimeouts writes kube-proxy's conntrack TCP timeouts in the
// node's namespace (the kernel keeps them per namespace), as kube-proxy
// does at its start: 24 h for established connections (the kernel's 5 days
// would keep dead ones), 1 h for CLOSE_WAIT (the kernel's 60 s ends
// half-closed connections a Service's backend still answers). A kernel
// without conntrack loaded yet has no such sysctl: said, and the start goes
// on (kube-proxy's e2e spec "should set TCP CLOSE_WAIT timeout" reads
// the entry's timeout).
func setConntrackTimeouts(h *netops.Handle, f *flags, log *slog.Logger) {
	for _, s := range []struct {
		key string
		d   time.Duration
	}{
		{"net.netfilter.nf_conntrack_tcp_timeout_established", f.svc.ctEstablished},
		{"net.netfilter.nf_conntrack_tcp_timeout_close_wait", f.svc.ctCloseWait},
	} {
		if s.d <= 0 {
			continue
		}
		if err := h.SetSysctlsAt(f.svc.procSys, netops.SysctlSetting{Key: s.key, Value: strconv.Itoa(int(s.d / time.Second))}); err != nil {
			log.Warn("services: conntrack timeout not set (in a container, /proc/sys is read-only: mount the host's /proc/sys/net "+
				"and pass --proc-sys-dir, as the chart does)", "sysctl", s.key, "proc-sys-dir", f.svc.procSys, "err", err)
		}
	}
}
