//go:build !nokube

package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/announce"
	"github.com/cnibox/cnibox/netops/nft"
)

// kernel is what the controller put in the node's kernel.
type kernel struct {
	// addrs: the egress addresses on the uplink, each with the renewal
	// its lifetime was last refreshed for; refreshed: when.
	addrs     map[netip.Addr]time.Time
	refreshed map[netip.Addr]time.Time
	warned    map[string]bool // the holders without a route, told once
}

// fence keeps the uplink's egress addresses to what this node holds:
// an address it holds is added, or its lifetime refreshed once per
// renewal while MayRefresh, and announced when it may have been gone; an
// address it no longer holds is removed at once.
func (c *controller) fence(now time.Time) {
	for ip, cl := range c.claims {
		p := netip.PrefixFrom(ip, 32)
		_, has := c.k.addrs[ip]
		switch {
		case cl.Holding(now):
			if c.k.addrs[ip].Equal(cl.sent) || !cl.MayRefresh(now) {
				continue
			}
			if err := c.cfg.Host.EnsureAddrLifetime(c.uplink, p, c.cfg.Timing.Lifetime); err != nil {
				c.cfg.Log.Error("egress gateways: cannot add an egress address to the uplink", "ip", ip, "uplink", c.uplink, "err", err)
				continue
			}
			lapsed := !has || now.Sub(c.k.refreshed[ip]) >= c.cfg.Timing.Lifetime
			c.k.addrs[ip], c.k.refreshed[ip] = cl.sent, now
			if lapsed {
				if err := announce.Addr(c.cfg.Host, c.uplink, ip); err != nil {
					c.cfg.Log.Warn("egress gateways: cannot announce an egress address (gratuitous ARP); the LAN learns it at its next ARP request", "ip", ip, "err", err)
				}
			}
		case has:
			c.drop(ip)
		}
	}
	for ip := range c.k.addrs {
		if c.claims[ip] == nil {
			c.drop(ip)
		}
	}
}

// drop removes ip from the uplink.
func (c *controller) drop(ip netip.Addr) {
	if err := c.cfg.Host.DeleteAddr(c.uplink, netip.PrefixFrom(ip, 32)); err != nil {
		c.cfg.Log.Error("egress gateways: cannot remove an egress address from the uplink; the kernel removes it when its lifetime ends", "ip", ip, "err", err)
	}
	delete(c.k.addrs, ip)
	delete(c.k.refreshed, ip)
}

// program writes the node's egress rules and routes for the plan.
func (c *controller) program() {
	spec := nft.EgressSpec{Cluster: c.cluster, Uplink: c.uplink}
	var routes []netops.EgressRoute
	table := netops.EgressTableFirst
	for _, u := range c.plan.Uses {
		name := u.Gateway + "/" + u.IP.String()
		switch {
		case u.Holder == c.node && len(u.Pods) > 0:
			spec.Rules = append(spec.Rules, nft.EgressRule{Name: name, EgressIP: u.IP, Held: true, Sources: u.Pods, Destinations: u.Destinations})
		case u.Holder != "" && u.Holder != c.node && len(u.Local) > 0 && table <= netops.EgressTableLast:
			via, err := c.routeTo(u.Holder)
			if err != nil {
				if !c.k.warned[u.Holder] {
					c.cfg.Log.Warn("egress gateways: no route to the holder of an egress address; this node's pods leave from their node's address", "ip", u.IP, "holder", u.Holder, "err", err)
					c.k.warned[u.Holder] = true
				}
				continue
			}
			delete(c.k.warned, u.Holder)
			spec.Rules = append(spec.Rules, nft.EgressRule{Name: name, EgressIP: u.IP, Sources: u.Local, Destinations: u.Destinations, Via: via.GW})
			routes = append(routes, netops.EgressRoute{Table: table, Via: via.GW, Dev: via.Dev, OnLink: via.Onlink,
				Throw: c.cluster, Destinations: u.Destinations, Sources: u.Local})
			table++
		}
	}
	// (Either order is safe: a kept source matches only packets routed
	// via the holder, Via.)
	if _, err := c.cfg.Host.NFT().EnsureEgress(spec); err != nil {
		c.cfg.Log.Error("egress gateways: cannot write the egress rules", "err", err)
		return
	}
	if err := c.cfg.Host.SyncEgressRoutes(routes); err != nil {
		c.cfg.Log.Error("egress gateways: cannot write the routes to the egress holders", "err", err)
	}
}

// routeTo is the main table's route to node's pod range: the way to that
// node over the overlay (vxlan: via its VTEP address, onlink; host-gw:
// via its address on the uplink). A backend whose route has no gateway
// (wireguard) cannot carry traffic to outside addresses to another node.
func (c *controller) routeTo(node string) (netops.Route, error) {
	o, _ := c.cfg.Cache.Get(cluster.Nodes, node)
	n, _ := o.(*cluster.Node)
	if n == nil {
		return netops.Route{}, fmt.Errorf("node %s: unknown", node)
	}
	var cidr netip.Prefix
	if i := slices.IndexFunc(n.PodCIDRs, func(p netip.Prefix) bool { return p.Addr().Is4() }); i >= 0 {
		cidr = n.PodCIDRs[i]
	}
	if !cidr.IsValid() {
		return netops.Route{}, fmt.Errorf("node %s has no IPv4 pod range (spec.podCIDRs)", node)
	}
	routes, err := c.cfg.Host.Routes("")
	if err != nil {
		return netops.Route{}, err
	}
	i := slices.IndexFunc(routes, func(r netops.Route) bool { return r.Dst == cidr && r.GW.IsValid() })
	if i < 0 {
		return netops.Route{}, fmt.Errorf("node %s: no route via a gateway to its pod range %s (the wireguard backend has none: it cannot carry egress traffic)", node, cidr)
	}
	return routes[i], nil
}
