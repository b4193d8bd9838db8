//go:build !nokube

package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

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
	// Overlay reports the node's uplink and the cluster's networks (IPv4,
	// IPv6 or both: a single-stack IPv6 cluster is served as an IPv4 one)
	// once the overlay agent has them (false: not yet).
	Overlay func() (uplink string, cluster []netip.Prefix, ok bool)
	Timing  Timing
	// DataDir is the store `cnibox inspect egress` reads (store.Dir's:
	// "" is $CNIBOX_DATA_DIR or the default, as for the CNI calls).
	DataDir string
	// Register, if set, registers the controller's metrics.
	Register func(prometheus.Collector) error
	// CRDPoll is how often an API without the CRD is asked again
	// (default kubeapi.CRDPoll, 10 s).
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
	if cfg.Recheck == 0 {
		cfg.Recheck = 30 * time.Second
	}
	k, err := addrhold.Connect(cfg.Cluster, what)
	if err != nil {
		return err
	}
	gwc, err := kubecore.GroupClient(k.REST, GroupVersion(), "/apis", &EgressGateway{}, &EgressGatewayList{})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !waitCRD(ctx, gwc, cfg) {
		return nil
	}
	var uplink string
	var clusterNets []netip.Prefix
	if !addrhold.WaitFor(ctx, func() (ok bool) { uplink, clusterNets, ok = cfg.Overlay(); return ok }) {
		return nil
	}
	c := newController(cfg, addrhold.MemberConfig{Clients: k, Kind: leaseKind(cfg.Namespace), Uplink: uplink,
		Host: cfg.Host, T: cfg.Timing, Log: cfg.Log, What: what, Metrics: metricNames}, clusterNets)
	c.gwc, c.core = gwc, k.Core
	if err := c.Register(cfg.Register); err != nil {
		return err
	}
	// (watched before the first read: a change in between is not missed)
	fwd, err := cfg.Host.WatchForwarding(ctx, func(err error) {
		cfg.Log.Warn("egress gateways: the watch of forwarding (IPv4 and IPv6) ended; it is read every "+cfg.Recheck.String(), "err", err)
	})
	if err != nil {
		cfg.Log.Warn("egress gateways: cannot watch forwarding (IPv4 and IPv6); it is read every "+cfg.Recheck.String(), "err", err)
	}
	c.Forwarding = fwd
	c.Publish(ctx, "it will hold no egress address until it can")
	if cfg.Cache == nil {
		cfg.Cache = cluster.New(cfg.Cluster, cfg.Log)
		cfg.Cache.Start(ctx)
		c.cfg.Cache = cfg.Cache
	}
	if c.gws, err = c.Watch(ctx, addrhold.Watched{Cache: cfg.Cache, Kinds: []cluster.Kind{cluster.Pods, cluster.Namespaces, cluster.Nodes},
		Client: gwc, Resource: Resource, Object: &EgressGateway{}, List: func() runtime.Object { return &EgressGatewayList{} }}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	cfg.Log.Info("egress gateways: serving", "node", k.Node, "uplink", uplink, "cluster", clusterNets)
	c.Loop(ctx, cfg.Recheck, func(ctx context.Context, now time.Time, rechecked bool) {
		// (every Recheck the kernel is checked against the plan again)
		c.resync = c.resync || rechecked
		c.step(ctx, now)
	})
	return nil
}

// metricNames are the controller's Prometheus metrics' (Config.Register).
var metricNames = addrhold.MetricNames{Subsystem: "egress", Held: "addresses_held",
	HeldHelp:      "Egress addresses this node holds.",
	TakeoversHelp: "Egress addresses this node took over from another holder whose Lease expired.",
	TakeoverHelp:  "From the last renewal this node saw of the previous holder to its own take of the Lease being accepted.",
	FailsHelp:     "Writes of an egress Lease that failed (other than a conflict with another node's write)."}

// waitCRD waits until the API serves EgressGateways and the agent may
// list them; false when ctx ended first. It says once why it waits.
func waitCRD(ctx context.Context, gwc rest.Interface, cfg Config) bool {
	return kubeapi.WaitCRD(ctx, gwc, kubeapi.CRDWait{Resource: Resource, Poll: cfg.CRDPoll, Log: cfg.Log,
		Waiting:   "egress gateways: not serving them: ",
		NotServed: "the API does not serve " + Resource + "." + GroupVersion().Group + " (apply deploy/kubernetes/egressgateway-crd.yaml to use them)",
		Forbidden: "the agent may not list " + Resource + "." + GroupVersion().Group + " (bin/cnibox.yaml's ClusterRole cnibox-egress grants it; flannel's manifest does not)"})
}
