//go:build !nokube

package egress

import (
	"context"
	"maps"
	"net/netip"
	"reflect"
	"time"

	"github.com/cnibox/cnibox/agent/addrhold"
	"github.com/cnibox/cnibox/agent/cluster"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// controller is Run's state, owned by its loop's goroutine but for the
// informers (which only poke it) and the Lease writes (which report on
// results, addrhold.Election).
type controller struct {
	cfg     Config
	node    string
	uplink  string
	cluster []netip.Prefix
	gwc     rest.Interface
	core    rest.Interface

	gws, leaseStore cache.Store // (pods, namespaces and nodes: cfg.Cache's)
	synced          []cache.InformerSynced
	kick            chan struct{}

	elect   *addrhold.Election
	holders map[netip.Addr]string
	plan    Plan
	dirty   bool
	warned  map[string]bool   // the holders without a route, told once
	status  map[string]string // the status last written of each gateway (JSON)

	m         *addrhold.Metrics
	takeovers uint64

	programmed Plan // the plan last written to the kernel, the status and the store
	resync     bool // write it again even if it did not change

	nets *addrhold.Networks
	fwd  <-chan bool // changes of forwarding (nil: not watched)
}

func newController(cfg Config, node, uplink string, cluster []netip.Prefix, leases *addrhold.Leases) *controller {
	c := &controller{cfg: cfg, node: node, uplink: uplink, cluster: cluster,
		kick: make(chan struct{}, 1), holders: map[netip.Addr]string{},
		status: map[string]string{}, m: newMetrics(), warned: map[string]bool{}}
	fence := &addrhold.Fence{Host: cfg.Host, Link: uplink, T: cfg.Timing, Log: cfg.Log, What: "egress gateways"}
	c.elect = addrhold.NewElection(addrhold.Config{T: cfg.Timing, Leases: leases, Fence: fence, Log: cfg.Log, What: "egress gateways",
		OnTake: func(_ netip.Addr, _ string, lastSeen time.Time) {
			c.takeovers++
			c.m.Took(lastSeen)
		},
		OnFailure: c.m.Failures.Inc})
	return c
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
	recheck := time.NewTicker(c.cfg.Recheck) // the networks and forwarding
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
		case _, ok := <-c.fwd:
			if !ok {
				// (ctx ended, or the watch failed and said so: the
				// recheck remains; nothing changed to publish)
				c.fwd = nil
				break
			}
			// (e.g. the bridge role turned it on with the node's first
			// pod: the node may hold addresses from now on)
			if err := c.nets.Publish(ctx); err != nil {
				c.cfg.Log.Warn("egress gateways: cannot publish this node's networks", "err", err)
			}
		case <-recheck.C:
			if err := c.nets.Publish(ctx); err != nil {
				c.cfg.Log.Warn("egress gateways: cannot publish this node's networks", "err", err)
			}
			c.resync = true // the kernel checked against the plan again
		case <-t.C:
		}
		c.step(ctx, time.Now())
	}
}

// step does what is due at now: read the Leases, decide, fence, and
// reprogram the node when the plan changed.
func (c *controller) step(ctx context.Context, now time.Time) {
	c.elect.Read(c.leaseStore)
	if c.dirty {
		c.plan = c.makePlan()
	}
	// The election of every address of every gateway (this node observes
	// those it may not hold too: their holders go into the plan).
	candidates := map[netip.Addr][]string{}
	for _, ip := range c.plan.IPs() {
		candidates[ip] = c.plan.Candidates[ip]
	}
	holders := c.elect.Step(ctx, now, candidates)
	if c.dirty || c.resync || !maps.Equal(holders, c.holders) {
		c.holders = holders
		c.plan = c.makePlan()
		c.dirty = false
		// Most events (any pod of the cluster changing) leave this node's
		// plan as it was: the kernel, the status and the store are written
		// only when it changed, and every Recheck (a rule removed under the
		// agent comes back).
		if c.resync || !reflect.DeepEqual(c.plan, c.programmed) {
			c.programmed, c.resync = c.plan, false
			c.program()
			c.writeStatus(ctx)
			c.record()
		}
	}
}

// makePlan plans from the informers' stores (the cache's too) and the
// holders.
func (c *controller) makePlan() Plan {
	in := Inputs{Self: c.node, Holders: c.holders, Cluster: c.cluster,
		Namespaces: map[string]map[string]string{}, Nodes: map[string]Node{}}
	for _, o := range c.gws.List() {
		if g, ok := o.(*EgressGateway); ok {
			in.Gateways = append(in.Gateways, Read(g))
		}
	}
	for _, o := range c.cfg.Cache.List(cluster.Pods) {
		if p, ok := o.(*cluster.Pod); ok {
			if pod, ok := readPod(p); ok {
				in.Pods = append(in.Pods, pod)
			}
		}
	}
	for _, o := range c.cfg.Cache.List(cluster.Namespaces) {
		if ns, ok := o.(*cluster.Namespace); ok {
			in.Namespaces[ns.Name] = ns.Labels
		}
	}
	for _, o := range c.cfg.Cache.List(cluster.Nodes) {
		if n, ok := o.(*cluster.Node); ok {
			in.Nodes[n.Name] = readNode(n)
		}
	}
	return Make(in)
}
