//go:build !nokube

package lbipam

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/kubecore"
)

// Config configures Run.
type Config struct {
	kubeapi.Cluster
	Log *slog.Logger
	// Cache is the agent's informer cache (agent/cluster): the Services
	// (their part of the controller's: the cache's Config.LoadBalancer
	// must be ServiceView), and the nodes' addresses and pod networks,
	// which no pool may hold. nil: Run makes one of its own.
	Cache *cluster.Cache
	// Namespace holds the Lease LeaseName (default kube-system).
	Namespace string
	// ClusterNetworks are the cluster's pod networks (net-conf.json's),
	// which no pool may hold (the nodes' pod CIDRs are besides).
	ClusterNetworks []netip.Prefix
	// Register, if set, registers the controller's metrics.
	Register func(prometheus.Collector) error
	// Every is the Lease's renewal period (default 2 s); the Lease lasts
	// three (at least 1 s).
	Every time.Duration
	// Resync is how often the leader plans and compares everything even
	// when nothing changed (default 30 s).
	Resync time.Duration
	// CRDPoll is how often an API without the CRD is asked again
	// (default kubeapi.CRDPoll, 10 s).
	CRDPoll time.Duration
	// BeforeWrite, if set, is called before each write of a Service's
	// status (a test stops the controller there).
	BeforeWrite func(service string)
}

// controller is one agent's part: the election, and while it leads, the
// informers and the writes.
type controller struct {
	cfg   Config
	core  rest.Interface // core/v1: Services, Events
	poolc rest.Interface // cnibox.io/v1alpha1
	netc  rest.Interface // networking.k8s.io/v1: ServiceCIDRs
	el    *election
	m     *metrics
	poke  chan struct{}

	lead *leading // nil while another agent leads
	// mu guards written and reported while sync's writers run
	// (writes.go); the loop's goroutine alone touches them otherwise.
	mu       sync.Mutex
	written  map[string]*svcObj // each Service as this leader last wrote it
	reported map[string]string  // the problem last reported of each Service
	poolSt   map[string]string  // each pool's status as last written
	lastFull time.Time
}

// leading is what runs while this agent leads.
type leading struct {
	stop   context.CancelFunc
	pools  cache.Store
	synced []func() bool
	// svcs and nodes are the controller's readers of the cache's Services
	// and nodes.
	svcs, nodes *cluster.Handler
	// listed: the Services were listed from the API server since this
	// agent leads (fresh.go).
	listed   bool
	reserved []netip.Prefix // the Services' networks (ServiceCIDRs)
}

// Run allocates while this agent holds the Lease, until ctx ends: it waits
// for the API to serve LoadBalancerIPPools (checking every CRDPoll), then
// takes part in the election; on the way out it gives the Lease up.
func Run(ctx context.Context, cfg Config) error {
	const what = "LoadBalancer IPAM"
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "kube-system"
	}
	if cfg.Every <= 0 {
		cfg.Every = 2 * time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Cache != nil && !cfg.Cache.KeepsLoadBalancers() {
		return fmt.Errorf("%s: the informer cache keeps no Service's part of the controller's (make it with cluster.Config.LoadBalancer lbipam.ServiceView)", what)
	}
	node, err := kubecore.NodeName(cfg.NodeName, what)
	if err != nil {
		return err
	}
	rc, err := cfg.Config(what)
	if err != nil {
		return err
	}
	c := &controller{cfg: cfg, m: newMetrics(), poke: make(chan struct{}, 1),
		written: map[string]*svcObj{}, reported: map[string]string{}, poolSt: map[string]string{}}
	if c.core, err = kubecore.GroupClient(writeRate(kubeapi.Protobuf(rc)), corev1.SchemeGroupVersion, "/api", &corev1.Service{}, &corev1.ServiceList{}, &corev1.Event{}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if c.poolc, err = kubecore.GroupClient(rc, GroupVersion(), "/apis", &LoadBalancerIPPool{}, &LoadBalancerIPPoolList{}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if c.netc, err = kubecore.GroupClient(rc, netv1.SchemeGroupVersion, "/apis", &netv1.ServiceCIDR{}, &netv1.ServiceCIDRList{}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	coord, err := kubecore.GroupClient(leaseRate(rc, cfg.Every), coordv1.SchemeGroupVersion, "/apis", &coordv1.Lease{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	every := cfg.Every
	c.el = &election{c: coord, namespace: cfg.Namespace, identity: node, every: every,
		duration: int32(max((3*every+time.Second-1)/time.Second, 1)), now: time.Now}
	if cfg.Register != nil {
		if err := cfg.Register(c.m); err != nil {
			return fmt.Errorf("%s: metrics: %w", what, err)
		}
	}
	if !c.waitCRD(ctx) {
		return nil
	}
	if cfg.Cache == nil {
		c.cfg.Cache = cluster.NewWith(cluster.Config{Cluster: cfg.Cluster, Log: cfg.Log, LoadBalancer: ServiceView})
		c.cfg.Cache.Start(ctx)
	}
	cfg.Log.Info("LoadBalancer IPAM: taking part in the election", "lease", cfg.Namespace+"/"+LeaseName, "identity", node)
	c.loop(ctx)
	return nil
}

// writeRate is rc with client-go's rate limit raised where rc sets none
// (its default, 5 requests a second with bursts of 10, held the writes of
// 1,000 Services created at once to 5 a second: 200 s; make bench-lb):
// the leader writes one status per Service (and an Event per problem),
// one at a time. The Lease's client keeps its own limiter.
func writeRate(rc *rest.Config) *rest.Config {
	c := *rc
	if c.QPS == 0 && c.RateLimiter == nil {
		c.QPS, c.Burst = 100, 200
	}
	return &c
}

// leaseRate is rc with a rate limit that never holds a renewal back where
// rc sets none: a step is a GET and a PUT every period, and client-go's
// default (5 a second, bursts of 10) throttled --lb-ipam-renew 200ms to a
// step every 400 ms, half the Lease's margin lost to the agent's own
// limiter (TestLeaseRate).
func leaseRate(rc *rest.Config, every time.Duration) *rest.Config {
	c := *rc
	if c.QPS == 0 && c.RateLimiter == nil {
		c.QPS = float32(max(5, 4*float64(time.Second)/float64(max(every, time.Millisecond))))
		c.Burst = max(10, int(c.QPS))
	}
	return &c
}

// waitCRD waits until the API serves LoadBalancerIPPools; false when ctx
// ended first. It says once why it waits.
func (c *controller) waitCRD(ctx context.Context) bool {
	return kubeapi.WaitCRD(ctx, c.poolc, kubeapi.CRDWait{Resource: Resource, Poll: c.cfg.CRDPoll, Log: c.cfg.Log,
		Waiting:   "LoadBalancer IPAM: waiting: ",
		NotServed: "the API does not serve " + Resource + "." + GroupVersion().Group + " (apply deploy/kubernetes/loadbalancerippool-crd.yaml)",
		Forbidden: "the agent may not list " + Resource + "." + GroupVersion().Group + " (bin/cnibox.yaml's ClusterRole cnibox-lb-ipam grants it)"})
}

// loop takes part in the election (renew, in a goroutine of its own, so
// that a long pass of writes never holds a renewal back: a leader whose
// Lease lapsed in the middle of 1,000 writes would stop writing and hand
// over) and plans on every change while it leads.
func (c *controller) loop(ctx context.Context) {
	held := make(chan bool, 1) // the election's last word
	rctx, stopRenew := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		c.renew(rctx, held)
	}()
	for {
		if c.lead != nil {
			c.sync(ctx)
		}
		select {
		case <-ctx.Done():
			c.stopLeading()
			stopRenew()
			<-renewed
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.el.release(rctx)
			cancel()
			return
		case h := <-held:
			switch {
			case h && c.lead == nil:
				c.startLeading(ctx)
			case !h && c.lead != nil:
				c.stopLeading()
			}
		case <-c.poke:
		}
	}
}

// renew takes or renews the Lease every period until ctx ends, telling
// held whether this agent holds it (the latest word only).
func (c *controller) renew(ctx context.Context, held chan bool) {
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	var told string
	for {
		h, err := c.el.step(ctx)
		if s := fmt.Sprint(err); err != nil && s != told && ctx.Err() == nil {
			c.cfg.Log.Warn("LoadBalancer IPAM: the Lease", "err", err)
			told = s
		} else if err == nil {
			told = ""
		}
		select {
		case <-held:
		default:
		}
		held <- h
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wake asks the loop to plan again.
func (c *controller) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// startLeading runs the informer of the pools, and registers on the
// cache's Services and nodes (the Services are listed once more before the
// first plan: fresh.go).
func (c *controller) startLeading(ctx context.Context) {
	c.cfg.Log.Info("LoadBalancer IPAM: this agent leads: it allocates the Services' addresses", "identity", c.el.identity)
	lctx, stop := context.WithCancel(ctx)
	l := &leading{stop: stop}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.wake() },
		UpdateFunc: func(any, any) { c.wake() },
		DeleteFunc: func(any) { c.wake() },
	}
	st, ctl := kubeapi.NewSlimInformer(c.poolc, Resource, &LoadBalancerIPPool{}, func() runtime.Object { return &LoadBalancerIPPoolList{} },
		cache.InformerOptions{Handler: h, Transform: func(o any) (any, error) { return o, nil }})
	l.pools = st
	go ctl.Run(lctx.Done())
	l.synced = append(l.synced, ctl.HasSynced)
	if reg, err := c.cfg.Cache.Handle(cluster.Services, h); err != nil {
		// (no informer could be made: no rest.Config; Run made one, so never)
		c.cfg.Log.Warn("LoadBalancer IPAM: cannot read the Services", "err", err)
		l.synced = append(l.synced, func() bool { return false })
	} else {
		l.svcs = reg
		l.synced = append(l.synced, reg.HasSynced)
	}
	if reg, err := c.cfg.Cache.Handle(cluster.Nodes, h); err != nil {
		c.cfg.Log.Warn("LoadBalancer IPAM: cannot read the nodes: their addresses are not kept out of the pools", "err", err)
	} else {
		l.nodes = reg
		l.synced = append(l.synced, reg.HasSynced)
	}
	c.lead = l
	c.written, c.reported, c.poolSt = map[string]*svcObj{}, map[string]string{}, map[string]string{}
	c.lastFull = time.Time{}
	c.m.leader.Set(1)
}

// stopLeading stops what startLeading ran.
func (c *controller) stopLeading() {
	if c.lead == nil {
		return
	}
	c.cfg.Log.Info("LoadBalancer IPAM: this agent no longer leads", "identity", c.el.identity)
	c.lead.stop()
	for _, h := range []*cluster.Handler{c.lead.svcs, c.lead.nodes} {
		if h != nil {
			h.Stop()
		}
	}
	c.lead = nil
	c.m.leader.Set(0)
	c.m.set(nil, 0)
}

// serviceNetworks are the ServiceCIDRs' networks (none where the API does
// not serve them).
func (c *controller) serviceNetworks(ctx context.Context) []netip.Prefix {
	var l netv1.ServiceCIDRList
	if err := c.netc.Get().Resource("servicecidrs").Do(ctx).Into(&l); err != nil {
		c.cfg.Log.Debug("LoadBalancer IPAM: cannot list ServiceCIDRs: the Services' networks are not kept out of the pools", "err", err)
		return nil
	}
	var out []netip.Prefix
	for _, s := range l.Items {
		for _, cidr := range s.Spec.CIDRs {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	return out
}
