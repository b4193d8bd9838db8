//go:build !nokube

package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
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
	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/netops"
)

// Config configures Run.
type Config struct {
	kubeapi.Cluster
	Log *slog.Logger
	// Cache is the agent's informer cache of pods, namespaces and nodes
	// (agent/cluster), which the controller reads with the agent's other
	// readers; nil: Run makes one of its own, run while it runs.
	Cache *cluster.Cache
	// Namespace holds the Leases (LeaseNamespace).
	Namespace string
	// Host is the node's network namespace.
	Host *netops.Handle
	// Overlay reports the node's uplink and the cluster's IPv4 network
	// once the overlay agent has them (false: not yet).
	Overlay func() (uplink string, cluster []netip.Prefix, ok bool)
	Timing  Timing
	// DataDir is the store `cnibox inspect egress` reads (store.Dir's:
	// "" is $CNIBOX_DATA_DIR or the default, as for the CNI calls).
	DataDir string
	// Register, if set, registers the controller's metrics.
	Register func(prometheus.Collector) error
	// CRDPoll is how often an API without the CRD is asked again
	// (default 30 s).
	CRDPoll time.Duration
	// Recheck is how often the uplink's networks and forwarding are read
	// again and the kernel checked against the plan (default 30 s); a
	// change of forwarding is seen at once besides (Host.WatchForwarding).
	Recheck time.Duration
}

// Run serves EgressGateways until ctx ends: it waits for the API to serve
// the kind (checking every CRDPoll) and for the overlay, publishes this
// node's networks, then takes part in the election of every address this
// node may hold and programs the node. On the way out it releases what it
// holds (the address first, then the Lease) and leaves the rules and
// routes of the other holders in place, so that pods keep their egress
// address while the agent restarts.
func Run(ctx context.Context, cfg Config) error {
	const what = "egress gateways"
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Timing == (Timing{}) {
		cfg.Timing = DefaultTiming
	}
	if cfg.CRDPoll == 0 {
		cfg.CRDPoll = 30 * time.Second
	}
	if cfg.Recheck == 0 {
		cfg.Recheck = 30 * time.Second
	}
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
	gwc, err := kubecore.GroupClient(rc, GroupVersion(), "/apis", &EgressGateway{}, &EgressGatewayList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	coord, err := kubecore.GroupClient(rc, coordv1.SchemeGroupVersion, "/apis", &coordv1.Lease{}, &coordv1.LeaseList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !waitCRD(ctx, gwc, cfg) {
		return nil
	}
	var uplink string
	var clusterNets []netip.Prefix
	for {
		var ok bool
		if uplink, clusterNets, ok = cfg.Overlay(); ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	leases := &addrhold.Leases{C: coord, Kind: leaseKind(cfg.Namespace), Node: node, Duration: int32(max(cfg.Timing.Lease/time.Second, 1))}
	c := newController(cfg, node, uplink, clusterNets, leases)
	c.gwc, c.core = gwc, core
	c.nets = &addrhold.Networks{Core: core, Node: node, Host: cfg.Host, Uplink: uplink, Log: cfg.Log, What: "egress gateways"}
	if cfg.Register != nil {
		if err := cfg.Register(c.m); err != nil {
			return fmt.Errorf("%s: metrics: %w", what, err)
		}
	}
	// (watched before the first read: a change in between is not missed)
	fwd, err := cfg.Host.WatchForwarding(ctx, func(err error) {
		cfg.Log.Warn("egress gateways: the watch of IPv4 forwarding ended; it is read every "+cfg.Recheck.String(), "err", err)
	})
	if err != nil {
		cfg.Log.Warn("egress gateways: cannot watch IPv4 forwarding; it is read every "+cfg.Recheck.String(), "err", err)
	}
	c.fwd = fwd
	if err := c.nets.Publish(ctx); err != nil {
		cfg.Log.Warn("egress gateways: cannot publish this node's networks; it will hold no egress address until it can", "err", err)
	}
	if cfg.Cache == nil {
		cfg.Cache = cluster.New(cfg.Cluster, cfg.Log)
		cfg.Cache.Start(ctx)
		c.cfg.Cache = cfg.Cache
	}
	if err := c.startInformers(ctx, gwc, coord); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	cfg.Log.Info("egress gateways: serving", "node", node, "uplink", uplink, "cluster", clusterNets)
	c.loop(ctx)
	return nil
}

// waitCRD waits until the API serves EgressGateways and the agent may
// list them; false when ctx ended first. It says once why it waits.
func waitCRD(ctx context.Context, gwc rest.Interface, cfg Config) bool {
	return kubeapi.WaitCRD(ctx, gwc, kubeapi.CRDWait{Resource: Resource, Poll: cfg.CRDPoll, Log: cfg.Log,
		Waiting:   "egress gateways: not serving them: ",
		NotServed: "the API does not serve " + Resource + "." + GroupVersion().Group + " (apply deploy/kubernetes/egressgateway-crd.yaml to use them)",
		Forbidden: "the agent may not list " + Resource + "." + GroupVersion().Group + " (bin/cnibox.yaml's ClusterRole cnibox-egress grants it; flannel's manifest does not)"})
}

// startInformers runs the informers of the gateways and the Leases, and
// registers on the cache's of pods, namespaces and nodes (until ctx ends);
// each event marks the plan dirty.
func (c *controller) startInformers(ctx context.Context, gwc, coord rest.Interface) error {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	}
	for _, k := range []cluster.Kind{cluster.Pods, cluster.Namespaces, cluster.Nodes} {
		reg, err := c.cfg.Cache.Handle(k, h)
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, reg.Stop)
		c.synced = append(c.synced, reg.HasSynced)
	}
	st, ctl := kubeapi.NewSlimInformer(gwc, Resource, &EgressGateway{}, func() runtime.Object { return &EgressGatewayList{} },
		cache.InformerOptions{Handler: h, Transform: keep})
	c.gws = st
	go ctl.Run(ctx.Done())
	c.synced = append(c.synced, ctl.HasSynced)
	lw := cache.NewFilteredListWatchFromClient(coord, "leases", c.cfg.Namespace, func(o *metav1.ListOptions) { o.LabelSelector = LeaseLabel })
	st, ctl = cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &coordv1.Lease{}, Handler: h})
	c.leaseStore = st
	go ctl.Run(ctx.Done())
	c.synced = append(c.synced, ctl.HasSynced)
	return nil
}

// keep is the identity transform.
func keep(o any) (any, error) { return o, nil }
