//go:build !nokube

package egress

import (
	"context"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"time"

	"github.com/cnibox/cnibox/agent/cluster"
	coordv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// controller is Run's state, owned by its loop's goroutine but for the
// informers (which only poke it) and the Lease writes (which report on
// results).
type controller struct {
	cfg     Config
	node    string
	uplink  string
	cluster []netip.Prefix
	leases  *leases
	gwc     rest.Interface
	core    rest.Interface

	gws, leaseStore cache.Store // (pods, namespaces and nodes: cfg.Cache's)
	synced          []cache.InformerSynced
	kick            chan struct{}

	claims   map[netip.Addr]*Claim
	recs     map[netip.Addr]*coordv1.Lease // the newest seen of each address's Lease
	inflight map[netip.Addr]bool
	results  chan result
	holders  map[netip.Addr]string
	plan     Plan
	dirty    bool
	k        kernel
	status   map[string]string // the status last written of each gateway (JSON)

	m         *metrics
	takeovers uint64

	programmed Plan // the plan last written to the kernel, the status and the store
	resync     bool // write it again even if it did not change

	published string      // the NetworksAnnotation value last written
	forwards  bool        // the node forwards IPv4 (as last checked)
	fwd       <-chan bool // changes of forwarding (nil: not watched)
}

// result is a Lease write's outcome.
type result struct {
	ip     netip.Addr
	action Action
	sent   time.Time
	lease  *coordv1.Lease // as written; nil on error
	err    error
	// from: the holder the Lease had before a Take ("" none), whose
	// record last changed at lastSeen (this node's clock).
	from     string
	lastSeen time.Time
}

func newController(cfg Config, node, uplink string, cluster []netip.Prefix) *controller {
	return &controller{cfg: cfg, node: node, uplink: uplink, cluster: cluster,
		kick: make(chan struct{}, 1), claims: map[netip.Addr]*Claim{}, recs: map[netip.Addr]*coordv1.Lease{},
		inflight: map[netip.Addr]bool{}, results: make(chan result, 16), holders: map[netip.Addr]string{},
		status: map[string]string{}, m: newMetrics(), k: kernel{addrs: map[netip.Addr]time.Time{}, refreshed: map[netip.Addr]time.Time{}, warned: map[string]bool{}}}
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
			c.shutdown()
			return
		case <-c.kick:
			c.dirty = true
		case r := <-c.results:
			c.done(r)
		case _, ok := <-c.fwd:
			if !ok {
				// (ctx ended, or the watch failed and said so: the
				// recheck remains; nothing changed to publish)
				c.fwd = nil
				break
			}
			// (e.g. the bridge role turned it on with the node's first
			// pod: the node may hold addresses from now on)
			if err := c.publishNetworks(ctx); err != nil {
				c.cfg.Log.Warn("egress gateways: cannot publish this node's networks", "err", err)
			}
		case <-recheck.C:
			if err := c.publishNetworks(ctx); err != nil {
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
	c.readLeases()
	if c.dirty {
		c.plan = c.makePlan()
	}
	// The election of every address of every gateway (this node observes
	// those it may not hold too: their holders go into the plan).
	holders := map[netip.Addr]string{}
	for _, ip := range c.plan.IPs() {
		cl := c.claim(ip)
		rec := record(c.recs[ip])
		rank, eligible := c.plan.Eligible[ip]
		if h := rec.Holder; h != "" && h != c.node {
			// The holder whose Lease runs out is no candidate: the
			// node after it goes first.
			if i := slices.Index(c.plan.Candidates[ip], h); i >= 0 && i < rank {
				rank--
			}
		}
		// a Lease held by a node the gateway does not make eligible is
		// no one's to this node (claim.go, T.Ineligible)
		holderOK := rec.Holder == "" || rec.Holder == c.node || slices.Contains(c.plan.Candidates[ip], rec.Holder)
		if a := cl.Next(rec, now, eligible, rank, holderOK); a != Wait && !c.inflight[ip] {
			c.write(ctx, ip, a, now)
		}
		if h := cl.Holder(rec, now, holderOK); h != "" {
			holders[ip] = h
		}
	}
	// Addresses no gateway names any more: release those held.
	for ip, cl := range c.claims {
		if !slices.Contains(c.plan.IPs(), ip) {
			if record(c.recs[ip]).Holder == c.node && cl.Holding(now) && !c.inflight[ip] {
				c.write(ctx, ip, Release, now)
			} else if !cl.Holding(now) && !c.inflight[ip] {
				delete(c.claims, ip)
			}
		}
	}
	c.fence(now)
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

func (c *controller) claim(ip netip.Addr) *Claim {
	cl := c.claims[ip]
	if cl == nil {
		cl = &Claim{T: c.cfg.Timing, Self: c.node}
		c.claims[ip] = cl
	}
	return cl
}

// readLeases takes the newest of each Lease from the informer.
func (c *controller) readLeases() {
	seen := map[netip.Addr]bool{}
	for _, o := range c.leaseStore.List() {
		l, ok := o.(*coordv1.Lease)
		if !ok {
			continue
		}
		ip, err := netip.ParseAddr(l.Annotations["cnibox.io/egress-ip"])
		if err != nil {
			continue
		}
		seen[ip] = true
		if old := c.recs[ip]; old == nil || old.ResourceVersion == l.ResourceVersion || newer(l.ResourceVersion, old.ResourceVersion) {
			c.recs[ip] = l
		}
	}
	for ip := range c.recs {
		if !seen[ip] && !c.inflight[ip] {
			delete(c.recs, ip) // deleted (an administrator's hand)
		}
	}
}

// write sends a Take, Renew or Release of ip's Lease on its own
// goroutine; a Release drops the address first.
func (c *controller) write(ctx context.Context, ip netip.Addr, a Action, now time.Time) {
	if a == Release {
		c.claims[ip].Lost()
		c.fence(now)
	}
	c.inflight[ip] = true
	prev := c.recs[ip]
	from, lastSeen := record(prev).Holder, c.claims[ip].seenAt
	go func() {
		wctx, cancel := context.WithTimeout(ctx, c.cfg.Timing.Lease)
		defer cancel()
		sent := time.Now()
		l, err := c.leases.write(wctx, ip, prev, a != Release)
		c.results <- result{ip: ip, action: a, sent: sent, lease: l, err: err, from: from, lastSeen: lastSeen}
	}()
}

// done takes a write's result.
func (c *controller) done(r result) {
	delete(c.inflight, r.ip)
	cl := c.claim(r.ip)
	if r.err != nil {
		if r.action != Release {
			cl.Lost()
		}
		if !stale(r.err) {
			c.m.failures.Inc()
			c.cfg.Log.Warn("egress gateways: cannot write the Lease of an egress address", "ip", r.ip, "action", r.action.String(), "err", r.err)
		}
		return
	}
	c.recs[r.ip] = r.lease
	if r.action == Release {
		cl.Lost()
		c.cfg.Log.Info("egress gateways: released an egress address", "ip", r.ip)
		return
	}
	if r.action == Take {
		c.cfg.Log.Info("egress gateways: holding an egress address", "ip", r.ip, "uplink", c.uplink, "from", r.from)
		if r.from != "" && r.from != c.node {
			c.takeovers++
			c.m.takeovers.Inc()
			c.m.takeover.Observe(time.Since(r.lastSeen).Seconds())
		}
	}
	cl.Done(r.sent)
	c.fence(time.Now())
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

// shutdown releases what this node holds: the addresses at once, the
// Leases with a last write (best effort, a second at most), so that the
// next holder need not wait for them to expire.
func (c *controller) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ip, cl := range c.claims {
		if !cl.Holding(time.Now()) {
			continue
		}
		cl.Lost()
		c.fence(time.Now())
		if _, err := c.leases.write(ctx, ip, c.recs[ip], false); err != nil {
			c.cfg.Log.Warn("egress gateways: cannot release the Lease of an egress address on the way out; it expires", "ip", ip, "err", err)
		}
	}
}
