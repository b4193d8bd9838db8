package cniplug

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/netops"
)

// The checks of a host veth that `cnibox doctor` runs for a routed veth
// (ptp) and azure-vnet's DoctorHost for its transparent mode.

// CheckHostVeth reports whether the endpoint's host veth exists, and
// whether it is up (note says what it is for); it returns the link.
func (c *EndpointCheck) CheckHostVeth(note string) (netops.Link, bool) {
	ep := c.Endpoint
	hl, err := c.Host.LinkByName(ep.HostVeth)
	if err != nil {
		c.Fail("host veth", "the pod lost its network (deleting a host veth takes the pod's "+ep.IfName+" with it): "+c.Recreate,
			"%s is missing from the node", ep.HostVeth)
		return hl, false
	}
	if !hl.Up {
		c.Fail("host veth", "ip link set "+ep.HostVeth+" up", "%s is down", ep.HostVeth)
	} else {
		c.Pass("host veth", "%s is up (%s)", ep.HostVeth, note)
	}
	return hl, true
}

// CheckHostRoutes reports whether the node routes each pod address to the
// host veth (the fix adds the route with the words how: "scope host",
// "proto static").
func (c *EndpointCheck) CheckHostRoutes(how string) {
	ep := c.Endpoint
	routes, err := c.Host.Routes(ep.HostVeth)
	if err != nil {
		c.Fail("host route", "", "list routes of %s: %v", ep.HostVeth, err)
	}
	for _, p := range ep.IPs {
		want := netip.PrefixFrom(p.Addr(), p.Addr().BitLen())
		if slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst == want && r.Table == 0 }) {
			c.Pass("host route", "%s dev %s", want, ep.HostVeth)
		} else {
			c.Fail("host route", fmt.Sprintf("ip route add %s dev %s %s", want, ep.HostVeth, how),
				"the node has no route %s dev %s: nothing reaches the pod", want, ep.HostVeth)
		}
	}
}
