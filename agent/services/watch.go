//go:build !nokube

package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// WatchConfig configures Watch.
type WatchConfig struct {
	// Cache is the agent's informer cache; its Node is this node.
	Cache *cluster.Cache
	Table Table
	// Resync is --service-resync (0: DefaultResync).
	Resync time.Duration
	// NodePorts is --nodeport-addresses; IfaceAddrs the node's interface
	// addresses (netops), read at each sync.
	NodePorts  NodePortAddresses
	IfaceAddrs func() ([]netip.Addr, error)
	// ClusterCIDRs are the pods' networks.
	ClusterCIDRs []netip.Prefix
	// Health (nil: one of Resync's) is the proxy's /healthz and /livez.
	Health  *ProxyHealth
	Metrics *Metrics
	Log     *slog.Logger
	// Synced, if set, is told of each successful sync (Config.Synced).
	Synced func(snap *svcmodel.Snapshot, full bool)
}

// Watch serves the cluster's Services until ctx ends: it registers on
// the cache's Services, EndpointSlices and Nodes (this node's zone,
// primary IPs and eligibility), waits for their first lists, then runs
// the Syncer on cfg.Table and the health check node ports. The table
// stays as the last sync left it.
func Watch(ctx context.Context, cfg WatchConfig) error {
	if cfg.Cache == nil || cfg.Table == nil {
		return errors.New("services: no informer cache or no table")
	}
	node := cfg.Cache.Node()
	if node == "" {
		return errors.New("services: this node's name is unknown (set --node-name or $NODE_NAME): local endpoints and NodePort addresses need it")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Health == nil {
		cfg.Health = NewProxyHealth(cfg.Resync)
	}
	w := &watch{cfg: cfg, node: node}
	var syncer *Syncer
	w.state = NewState(func() { syncer.Trigger() })
	hc := &HealthChecks{Healthy: cfg.Health.Healthy, Log: cfg.Log}
	defer hc.Close()
	syncer = NewSyncer(Config{Table: cfg.Table, State: w.state, Resync: cfg.Resync, NodePortAddrs: w.nodePortAddrs,
		ClusterCIDRs: cfg.ClusterCIDRs, ServiceCIDRs: w.serviceCIDRs, Health: cfg.Health, HealthChecks: hc, Metrics: cfg.Metrics, Log: cfg.Log, Synced: cfg.Synced})
	var handlers []*cluster.Handler
	var synced []cache.InformerSynced
	defer func() {
		for _, h := range handlers {
			h.Stop()
		}
	}()
	for kind, h := range map[cluster.Kind]cache.ResourceEventHandler{
		cluster.Nodes: handler(w.setNode, w.deleteNode), cluster.Services: handler(w.setService, w.deleteService),
		cluster.EndpointSlices: handler(w.setSlice, w.deleteSlice),
		cluster.ServiceCIDRs:   handler(w.setServiceCIDR, w.deleteServiceCIDR),
	} {
		reg, err := cfg.Cache.Handle(kind, h)
		if err != nil {
			return fmt.Errorf("services: %w", err)
		}
		handlers = append(handlers, reg)
		if kind != cluster.ServiceCIDRs {
			synced = append(synced, reg.HasSynced)
		}
	}
	// (the first list of ServiceCIDRs is not waited for: a cluster
	// without their API, before 1.33, is served without the check of
	// the unallocated range.)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // (ctx ended)
	}
	if w.hostIPs() == nil {
		cfg.Log.Warn("services: this node's Node is not in the API (yet): no zone, and --nodeport-addresses primary serves no address until it is", "node", node)
	}
	cfg.Log.Info("services: the proxy's informers synced; first sync", "resync", cfg.Resync, "nodeport-addresses", cfg.NodePorts.String())
	return syncer.Run(ctx)
}

// watch is Watch's handlers' state.
type watch struct {
	cfg   WatchConfig
	node  string
	state *State

	mu   sync.Mutex
	host []netip.Addr // this node's primary IPs
	// cidrs are the ServiceCIDR objects' ranges, by name.
	cidrs map[string][]netip.Prefix
}

// handler is a handler calling set for each object and del for each
// deleted one (a DeletedFinalStateUnknown's object too).
func handler(set, del func(any)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			del(obj)
		},
	}
}

func (w *watch) setNode(obj any) {
	n, ok := obj.(*cluster.Node)
	if !ok || n.Name != w.node {
		return
	}
	w.mu.Lock()
	changed := !slices.Equal(w.host, n.HostIPs)
	w.host = n.HostIPs
	w.mu.Unlock()
	w.cfg.Health.SetLeaving(n.Leaving)
	w.state.SetNode(Node{Name: n.Name, Zone: n.Labels[corev1.LabelTopologyZone]})
	if changed {
		w.state.Touch()
	}
}

// deleteNode: this node's Node gone is a node that is leaving.
func (w *watch) deleteNode(obj any) {
	if n, ok := obj.(*cluster.Node); ok && n.Name == w.node {
		w.cfg.Health.SetLeaving(true)
	}
}

func (w *watch) hostIPs() []netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.host
}

func (w *watch) setService(obj any) {
	if s, ok := obj.(*cluster.Service); ok {
		w.state.SetService(s)
	}
}

func (w *watch) deleteService(obj any) {
	if s, ok := obj.(*cluster.Service); ok {
		w.state.DeleteService(s.Namespace, s.Name)
	}
}

func (w *watch) setSlice(obj any) {
	if s, ok := obj.(*cluster.EndpointSlice); ok {
		w.state.SetSlice(s)
	}
}

func (w *watch) deleteSlice(obj any) {
	if s, ok := obj.(*cluster.EndpointSlice); ok {
		w.state.DeleteSlice(s.Namespace, s.Name)
	}
}

// nodePortAddrs is the Syncer's NodePortAddrs: --nodeport-addresses
// resolved against the node's addresses.
func (w *watch) nodePortAddrs() ([]netip.Addr, bool, error) {
	var addrs []netip.Addr
	if w.cfg.IfaceAddrs != nil {
		var err error
		if addrs, err = w.cfg.IfaceAddrs(); err != nil {
			return nil, false, err
		}
	}
	out, all := w.cfg.NodePorts.Resolve(w.hostIPs(), addrs)
	return out, all, nil
}

func (w *watch) setServiceCIDR(obj any) {
	c, ok := obj.(*cluster.ServiceCIDR)
	if !ok {
		return
	}
	w.mu.Lock()
	changed := !slices.Equal(w.cidrs[c.Name], c.CIDRs)
	if w.cidrs == nil {
		w.cidrs = map[string][]netip.Prefix{}
	}
	w.cidrs[c.Name] = c.CIDRs
	w.mu.Unlock()
	if changed {
		w.state.Touch()
	}
}

func (w *watch) deleteServiceCIDR(obj any) {
	c, ok := obj.(*cluster.ServiceCIDR)
	if !ok {
		return
	}
	w.mu.Lock()
	_, had := w.cidrs[c.Name]
	delete(w.cidrs, c.Name)
	w.mu.Unlock()
	if had {
		w.state.Touch()
	}
}

// serviceCIDRs is the Syncer's ServiceCIDRs: every ServiceCIDR's
// ranges, sorted, once each (kube-proxy's OnServiceCIDRsChanged).
func (w *watch) serviceCIDRs() []netip.Prefix {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []netip.Prefix
	for _, ps := range w.cidrs {
		out = append(out, ps...)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}
