//go:build !nokube

package lbannounce

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/addrhold"
	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lbipam"
	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/netops"
)

// The Leases of the announced addresses: cnibox-lb-192-0-2-10, labelled
// and annotated LeaseLabel, in Config.Namespace.
const (
	LeasePrefix = "cnibox-lb-"
	LeaseLabel  = "cnibox.io/lb-ip"
	// LeaseNamespace is the default namespace of the Leases: the egress
	// gateways', where the agent's admission policy lets it write a
	// Lease only with its own node as the holder (or release its own).
	LeaseNamespace = "cnibox-egress"
)

// what starts the log lines.
const what = "load balancer announcements"

// Config configures Run.
type Config struct {
	kubeapi.Cluster
	Log *slog.Logger
	// Cache is the agent's informer cache (Services, EndpointSlices,
	// nodes); nil: Run makes one of its own.
	Cache *cluster.Cache
	// Namespace holds the Leases (LeaseNamespace).
	Namespace string
	// Host is the node's network namespace.
	Host *netops.Handle
	// Overlay reports the node's uplink once the overlay agent has it.
	Overlay func() (uplink string, ok bool)
	Timing  addrhold.Timing
	// DataDir is the store `cnibox inspect lb` reads ("" the default).
	DataDir string
	// Register, if set, registers the controller's metrics.
	Register func(prometheus.Collector) error
	// CRDPoll is how often an API without the pools' CRD is asked again
	// (default kubeapi.CRDPoll, 10 s); Recheck how often the uplink's networks are read
	// again (default 30 s).
	CRDPoll, Recheck time.Duration
}

// controller is Run's state, owned by its loop's goroutine. The
// election's part is the Member's.
type controller struct {
	*addrhold.Member
	cfg     Config
	pools   cache.Store
	plan    Plan
	written bool
}

// Run announces the addresses this node is elected for until ctx ends: it
// waits for the API to serve LoadBalancerIPPools and for the overlay's
// uplink, publishes the node's networks, and takes part in the election
// of every pool address a Service holds. On the way out it releases what
// it holds (the address first, then the Lease).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Timing == (addrhold.Timing{}) {
		cfg.Timing = addrhold.DefaultTiming
	}
	if cfg.Namespace == "" {
		cfg.Namespace = LeaseNamespace
	}
	cfg.Recheck = cmpOr(cfg.Recheck, 30*time.Second)
	k, err := addrhold.Connect(cfg.Cluster, what)
	if err != nil {
		return err
	}
	poolc, err := kubecore.GroupClient(k.REST, lbipam.GroupVersion(), "/apis", &lbipam.LoadBalancerIPPool{}, &lbipam.LoadBalancerIPPoolList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !waitCRD(ctx, poolc, cfg) {
		return nil
	}
	var uplink string
	if !addrhold.WaitFor(ctx, func() (ok bool) { uplink, ok = cfg.Overlay(); return ok }) {
		return nil
	}
	c := &controller{cfg: cfg, Member: addrhold.NewMember(addrhold.MemberConfig{Clients: k,
		Kind: addrhold.Kind{Prefix: LeasePrefix, Namespace: cfg.Namespace, Label: LeaseLabel}, Uplink: uplink,
		Host: cfg.Host, T: cfg.Timing, Log: cfg.Log, What: what, Metrics: metricNames})}
	if err := c.Register(cfg.Register); err != nil {
		return err
	}
	c.Publish(ctx, "it announces nothing until it can")
	if cfg.Cache == nil {
		cfg.Cache = cluster.New(cfg.Cluster, cfg.Log)
		cfg.Cache.Start(ctx)
		c.cfg.Cache = cfg.Cache
	}
	if c.pools, err = c.Watch(ctx, addrhold.Watched{Cache: cfg.Cache, Kinds: []cluster.Kind{cluster.Services, cluster.EndpointSlices, cluster.Nodes},
		Client: poolc, Resource: lbipam.Resource, Object: &lbipam.LoadBalancerIPPool{},
		List: func() runtime.Object { return &lbipam.LoadBalancerIPPoolList{} }}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	cfg.Log.Info(what+": serving", "node", k.Node, "uplink", uplink, "leases", cfg.Namespace)
	c.Loop(ctx, cfg.Recheck, func(ctx context.Context, now time.Time, _ bool) { c.step(ctx, now) })
	return nil
}

// metricNames are the controller's Prometheus metrics' (Config.Register).
var metricNames = addrhold.MetricNames{Subsystem: "lb", Held: "addresses_announced",
	HeldHelp:      "LoadBalancer addresses this node announces.",
	TakeoversHelp: "LoadBalancer addresses this node took over from another announcer whose Lease expired.",
	TakeoverHelp:  "From the last renewal this node saw of the previous announcer to its own take of the Lease being accepted.",
	FailsHelp:     "Writes of a LoadBalancer address's Lease that failed (other than a conflict with another node's write)."}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// waitCRD waits until the API serves LoadBalancerIPPools and the agent may
// list them; false when ctx ended first. It says once why it waits.
func waitCRD(ctx context.Context, poolc rest.Interface, cfg Config) bool {
	return kubeapi.WaitCRD(ctx, poolc, kubeapi.CRDWait{Resource: lbipam.Resource, Poll: cfg.CRDPoll, Log: cfg.Log,
		Waiting:   what + ": not serving: ",
		NotServed: "the API does not serve " + lbipam.Resource + ".cnibox.io (apply deploy/kubernetes/loadbalancerippool-crd.yaml to use them)",
		Forbidden: "the agent may not list " + lbipam.Resource + ".cnibox.io (the chart's ClusterRole cnibox-lb-announce grants it, with loadBalancer.announce)"})
}

// step does what is due at now: read the Leases, plan when something
// changed, take part in the election, fence, record.
func (c *controller) step(ctx context.Context, now time.Time) {
	changed := false
	if c.Dirty {
		p := Make(c.inputs())
		changed = !reflect.DeepEqual(p, c.plan)
		c.plan, c.Dirty = p, false
	}
	holders := c.Elect.Step(ctx, now, c.plan.Candidates())
	if changed || !c.written || !maps.Equal(holders, c.Holders) {
		c.Holders = holders
		c.record()
	}
}

// inputs reads the plan's inputs from the informers.
func (c *controller) inputs() Inputs {
	in := Inputs{Self: c.Node}
	for _, o := range c.pools.List() {
		if p, ok := o.(*lbipam.LoadBalancerIPPool); ok {
			in.Pools = append(in.Pools, lbipam.ReadAnnounced(p))
		}
	}
	ready := map[string][]string{} // by Service key: nodes with a ready endpoint
	for _, o := range c.cfg.Cache.List(cluster.EndpointSlices) {
		e, ok := o.(*cluster.EndpointSlice)
		if !ok || e.Service == "" {
			continue
		}
		key := e.Namespace + "/" + e.Service
		for _, ep := range e.Endpoints {
			if ep.Ready && ep.Node != "" {
				ready[key] = append(ready[key], ep.Node)
			}
		}
	}
	for _, o := range c.cfg.Cache.List(cluster.Services) {
		s, ok := o.(*cluster.Service)
		if !ok || len(s.LoadBalancerIPs) == 0 {
			continue
		}
		in.Services = append(in.Services, Service{Key: s.Key(), IPs: s.LoadBalancerIPs, Local: s.ExternalLocal, Ready: ready[s.Key()]})
	}
	for _, o := range c.cfg.Cache.List(cluster.Nodes) {
		if n, ok := o.(*cluster.Node); ok {
			in.Nodes = append(in.Nodes, Node{Name: n.Name, Labels: n.Labels, Networks: addrhold.ParseNetworks(n.EgressNetworks), Leaving: n.Leaving})
		}
	}
	return in
}
