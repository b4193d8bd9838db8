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
// results, addrhold.Election). The election's part is the Member's.
type controller struct {
	*addrhold.Member
	cfg     Config
	cluster []netip.Prefix
	gwc     rest.Interface
	core    rest.Interface

	gws    cache.Store // (pods, namespaces and nodes: cfg.Cache's)
	plan   Plan
	warned map[string]bool   // the holders without a route, told once
	status map[string]string // the status last written of each gateway (JSON)

	programmed Plan // the plan last written to the kernel, the status and the store
	resync     bool // write it again even if it did not change
}

func newController(cfg Config, mc addrhold.MemberConfig, cluster []netip.Prefix) *controller {
	return &controller{Member: addrhold.NewMember(mc), cfg: cfg, cluster: cluster,
		status: map[string]string{}, warned: map[string]bool{}}
}

// step does what is due at now: read the Leases, decide, fence, and
// reprogram the node when the plan changed.
func (c *controller) step(ctx context.Context, now time.Time) {
	if c.Dirty {
		c.plan = c.makePlan()
	}
	// The election of every address of every gateway (this node observes
	// those it may not hold too: their holders go into the plan).
	candidates := map[netip.Addr][]string{}
	for _, ip := range c.plan.IPs() {
		candidates[ip] = c.plan.Candidates[ip]
	}
	holders := c.Elect.Step(ctx, now, candidates)
	if c.Dirty || c.resync || !maps.Equal(holders, c.Holders) {
		c.Holders = holders
		c.plan = c.makePlan()
		c.Dirty = false
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
	in := Inputs{Self: c.Node, Holders: c.Holders, Cluster: c.cluster,
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
