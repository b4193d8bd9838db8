//go:build !nokube

package egress

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// program writes the node's egress rules and routes for the plan (the
// addresses on the uplink are the election's fence's, agent/addrhold).
func (c *controller) program() {
	spec := nft.EgressSpec{Cluster: c.cluster, Uplink: c.Uplink}
	var routes []netops.EgressRoute
	table := netops.EgressTableFirst
	for _, u := range c.plan.Uses {
		name := u.Gateway + "/" + u.IP.String()
		switch {
		case u.Holder == c.Node && len(u.Pods) > 0:
			spec.Rules = append(spec.Rules, nft.EgressRule{Name: name, EgressIP: u.IP, Held: true, Sources: u.Pods, Destinations: u.Destinations})
		case u.Holder != "" && u.Holder != c.Node && len(u.Local) > 0 && table <= netops.EgressTableLast:
			via, err := c.routeTo(u.Holder, u.IP.Is6())
			if err != nil {
				if !c.warned[u.Holder] {
					c.cfg.Log.Warn("egress gateways: no route to the holder of an egress address; this node's pods leave from their node's address", "ip", u.IP, "holder", u.Holder, "err", err)
					c.warned[u.Holder] = true
				}
				continue
			}
			delete(c.warned, u.Holder)
			throw := sameFamily(c.cluster, u.IP)
			spec.Rules = append(spec.Rules, nft.EgressRule{Name: name, EgressIP: u.IP, Sources: u.Local, Destinations: u.Destinations, Via: via.GW})
			routes = append(routes, netops.EgressRoute{Table: table, Via: via.GW, Dev: via.Dev, OnLink: via.Onlink,
				Throw: throw, Destinations: u.Destinations, Sources: u.Local})
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

// routeTo is the main table's route to node's pod range of v6's family:
// the way to that node over the overlay (vxlan: via its VTEP address,
// onlink; host-gw: via its address on the uplink). A backend whose route
// has no gateway (wireguard) cannot carry traffic to outside addresses to
// another node.
func (c *controller) routeTo(node string, v6 bool) (netops.Route, error) {
	o, _ := c.cfg.Cache.Get(cluster.Nodes, node)
	n, _ := o.(*cluster.Node)
	if n == nil {
		return netops.Route{}, fmt.Errorf("node %s: unknown", node)
	}
	var cidr netip.Prefix
	if i := slices.IndexFunc(n.PodCIDRs, func(p netip.Prefix) bool { return p.Addr().Is6() == v6 }); i >= 0 {
		cidr = n.PodCIDRs[i]
	}
	if !cidr.IsValid() {
		fam := "IPv4"
		if v6 {
			fam = "IPv6"
		}
		return netops.Route{}, fmt.Errorf("node %s has no %s pod range (spec.podCIDRs)", node, fam)
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
