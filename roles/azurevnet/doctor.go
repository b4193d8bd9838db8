package azurevnet

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// doctorHost checks a transparent attachment's node side: the host end is
// up with proxy ARP on, and the node routes each pod address to it. It
// returns the host end's MTU; bridge mode is doctor's bridge port check.
func doctorHost(c *cniplug.EndpointCheck) (int, bool) {
	ep := c.Endpoint
	if ep.Plugin != "azure-vnet" || !isTransparent(ep) {
		return 0, false
	}
	hl, ok := c.CheckHostVeth("azure-vnet transparent: no bridge, the node routes to the pod through it")
	if !ok {
		return 0, true
	}
	key := "net.ipv4.conf." + ep.HostVeth + ".proxy_arp"
	if v, err := c.Host.Sysctl(key); err != nil || v != "1" {
		if v == "" {
			v = "-"
		}
		c.Fail("proxy arp", "sysctl -w "+key+"=1", "proxy ARP is off on %s (%s): the pod cannot resolve its gateway 169.254.1.1", ep.HostVeth, v)
	} else {
		c.Pass("proxy arp", "%s answers ARP for the pod's gateway", ep.HostVeth)
	}
	c.CheckHostRoutes("proto static")
	return hl.MTU, true
}

// doctorGateway stands for the ping of a transparent pod's gateway, which
// no interface holds: the pod's neighbour entry for it holds the host
// end's MAC and is not failed, and the node has a route that covers it out
// of another interface (proxy ARP answers only then).
func doctorGateway(c *cniplug.EndpointCheck) bool {
	ep := c.Endpoint
	if ep.Plugin != "azure-vnet" || !isTransparent(ep) {
		return false
	}
	if c.Pod == nil {
		return true
	}
	hl, herr := c.Host.LinkByName(ep.HostVeth)
	neighs, err := c.Pod.NeighDetails(ep.IfName)
	if err != nil || herr != nil {
		c.Fail("gateway", "", "neighbour entries of %s in the pod: %v %v", ep.IfName, err, herr)
		return true
	}
	nodeRoutes, _ := c.Host.Routes("")
	for _, gw := range ep.Gateways {
		i := slices.IndexFunc(neighs, func(n netops.NeighDetail) bool { return n.IP == gw })
		switch {
		case i < 0 || !bytes.Equal(neighs[i].MAC, hl.MAC):
			fix := fmt.Sprintf("%s neigh replace %s lladdr %s dev %s nud probe", c.InPod, gw, hl.MAC, ep.IfName)
			c.Fail("gateway", fix, "the pod's neighbour entry for %s does not name %s's MAC %s", gw, ep.HostVeth, hl.MAC)
		case neighs[i].State == "FAILED" || neighs[i].State == "INCOMPLETE":
			c.Fail("gateway", "check proxy ARP on "+ep.HostVeth+" and the node's route for "+gw.String(),
				"the pod's neighbour entry for %s is %s: the host end does not answer for it", gw, neighs[i].State)
		case gw.Is4() && !slices.ContainsFunc(nodeRoutes, func(r netops.Route) bool { return r.Dst.Contains(gw) && r.Dev != ep.HostVeth }):
			c.Fail("gateway", "give the node a default route", "the node has no route that covers %s, so %s does not answer ARP for it", gw, ep.HostVeth)
		default:
			c.Pass("gateway", "%s resolves to %s (%s) by proxy ARP, %s", gw, hl.MAC, ep.HostVeth, neighs[i].State)
		}
	}
	return true
}
