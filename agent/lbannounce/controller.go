//go:build !nokube

package lbannounce

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// (default 30 s); Recheck how often the uplink's networks are read
	// again (default 30 s).
	CRDPoll, Recheck time.Duration
}

// controller is Run's state, owned by its loop's goroutine.
type controller struct {
	cfg        Config
	node       string
	uplink     string
	pools      cache.Store
	leaseStore cache.Store
	synced     []cache.InformerSynced
	kick       chan struct{}

	elect   *addrhold.Election
	nets    *addrhold.Networks
	plan    Plan
	holders map[netip.Addr]string
	dirty   bool
	written bool

	m         *addrhold.Metrics
	takeovers uint64
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
	cfg.CRDPoll = cmpOr(cfg.CRDPoll, 30*time.Second)
	cfg.Recheck = cmpOr(cfg.Recheck, 30*time.Second)
	node, err := kubecore.NodeName(cfg.NodeName, what)
	if err != nil {
		return err
	}
	rc, err := cfg.Config(what)
	if err != nil {
		return err
	}
	core, err := kubecore.GroupClient(rc, corev1.SchemeGroupVersion, "/api", &corev1.Node{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	poolc, err := kubecore.GroupClient(rc, lbipam.GroupVersion(), "/apis", &lbipam.LoadBalancerIPPool{}, &lbipam.LoadBalancerIPPoolList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	coord, err := kubecore.GroupClient(rc, coordv1.SchemeGroupVersion, "/apis", &coordv1.Lease{}, &coordv1.LeaseList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !waitCRD(ctx, poolc, cfg) {
		return nil
	}
	var uplink string
	for {
		var ok bool
		if uplink, ok = cfg.Overlay(); ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	c := &controller{cfg: cfg, node: node, uplink: uplink, kick: make(chan struct{}, 1), m: newMetrics(), holders: map[netip.Addr]string{}}
	leases := &addrhold.Leases{C: coord, Kind: addrhold.Kind{Prefix: LeasePrefix, Namespace: cfg.Namespace, Label: LeaseLabel},
		Node: node, Duration: int32(max(cfg.Timing.Lease/time.Second, 1))}
	fence := &addrhold.Fence{Host: cfg.Host, Link: uplink, T: cfg.Timing, Log: cfg.Log, What: what}
	c.elect = addrhold.NewElection(addrhold.Config{T: cfg.Timing, Leases: leases, Fence: fence, Log: cfg.Log, What: what,
		OnTake: func(_ netip.Addr, _ string, lastSeen time.Time) {
			c.takeovers++
			c.m.Took(lastSeen)
		},
		OnFailure: c.m.Failures.Inc})
	c.nets = &addrhold.Networks{Core: core, Node: node, Host: cfg.Host, Uplink: uplink, Log: cfg.Log, What: what}
	if cfg.Register != nil {
		if err := cfg.Register(c.m); err != nil {
			return fmt.Errorf("%s: metrics: %w", what, err)
		}
	}
	if err := c.nets.Publish(ctx); err != nil {
		cfg.Log.Warn(what+": cannot publish this node's networks; it announces nothing until it can", "err", err)
	}
	if cfg.Cache == nil {
		cfg.Cache = cluster.New(cfg.Cluster, cfg.Log)
		cfg.Cache.Start(ctx)
		c.cfg.Cache = cfg.Cache
	}
	if err := c.startInformers(ctx, poolc, coord); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	cfg.Log.Info(what+": serving", "node", node, "uplink", uplink, "leases", cfg.Namespace)
	c.loop(ctx)
	return nil
}

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

// startInformers runs the informers of the pools and the Leases and
// registers on the cache's Services, EndpointSlices and nodes; each event
// marks the plan dirty.
func (c *controller) startInformers(ctx context.Context, poolc, coord rest.Interface) error {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	}
	for _, k := range []cluster.Kind{cluster.Services, cluster.EndpointSlices, cluster.Nodes} {
		reg, err := c.cfg.Cache.Handle(k, h)
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, reg.Stop)
		c.synced = append(c.synced, reg.HasSynced)
	}
	st, ctl := kubeapi.NewSlimInformer(poolc, lbipam.Resource, &lbipam.LoadBalancerIPPool{}, func() runtime.Object { return &lbipam.LoadBalancerIPPoolList{} },
		cache.InformerOptions{Handler: h, Transform: func(o any) (any, error) { return o, nil }})
	c.pools = st
	go ctl.Run(ctx.Done())
	c.synced = append(c.synced, ctl.HasSynced)
	lw := cache.NewFilteredListWatchFromClient(coord, "leases", c.cfg.Namespace, func(o *metav1.ListOptions) { o.LabelSelector = LeaseLabel })
	st, ctl = cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &coordv1.Lease{}, Handler: h})
	c.leaseStore = st
	go ctl.Run(ctx.Done())
	c.synced = append(c.synced, ctl.HasSynced)
	return nil
}

// poke marks the plan dirty.
func (c *controller) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// tick is the loop's period: the election's decisions and the fence are
// checked this often.
const tick = 50 * time.Millisecond

func (c *controller) loop(ctx context.Context) {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	c.dirty = true
	t := time.NewTicker(tick)
	defer t.Stop()
	recheck := time.NewTicker(c.cfg.Recheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			c.elect.Shutdown()
			return
		case <-c.kick:
			c.dirty = true
		case r := <-c.elect.Results():
			c.elect.Done(r)
		case <-recheck.C:
			if err := c.nets.Publish(ctx); err != nil {
				c.cfg.Log.Warn(what+": cannot publish this node's networks", "err", err)
			}
		case <-t.C:
		}
		c.step(ctx, time.Now())
	}
}

// step does what is due at now: read the Leases, plan when something
// changed, take part in the election, fence, record.
func (c *controller) step(ctx context.Context, now time.Time) {
	c.elect.Read(c.leaseStore)
	changed := false
	if c.dirty {
		p := Make(c.inputs())
		changed = !reflect.DeepEqual(p, c.plan)
		c.plan, c.dirty = p, false
	}
	holders := c.elect.Step(ctx, now, c.plan.Candidates())
	if changed || !c.written || !maps.Equal(holders, c.holders) {
		c.holders = holders
		c.record()
	}
}

// inputs reads the plan's inputs from the informers.
func (c *controller) inputs() Inputs {
	in := Inputs{Self: c.node}
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
