package cli

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/azurevnet"
	"github.com/cnibox/cnibox/store"
)

// isTransparent reports whether ep is an azure-vnet attachment in
// transparent mode: a routed host veth whose gateway (169.254.1.1) no
// interface holds, so it cannot be pinged; the host end answers ARP for it.
func isTransparent(ep store.Endpoint) bool { return ep.Extra["mode"] == azurevnet.ModeTransparent }

// checkTransparentHost: the host end is up with proxy ARP on, and the node
// routes each pod address to it. It returns the host end's MTU.
func (d *doctor) checkTransparentHost(host *netops.Handle, ep store.Endpoint) int {
	hl, ok := d.checkHostVethUp(host, ep, "azure-vnet transparent: no bridge, the node routes to the pod through it")
	if !ok {
		return 0
	}
	key := "net.ipv4.conf." + ep.HostVeth + ".proxy_arp"
	if v, err := host.Sysctl(key); err != nil || v != "1" {
		d.fail("proxy arp", "sysctl -w "+key+"=1", "proxy ARP is off on %s (%s): the pod cannot resolve its gateway 169.254.1.1", ep.HostVeth, orDash(v))
	} else {
		d.pass("proxy arp", "%s answers ARP for the pod's gateway", ep.HostVeth)
	}
	d.checkHostRoutes(host, ep, "proto static")
	return hl.MTU
}

// checkVirtualGateway stands for the ping of a transparent pod's gateway:
// the pod's neighbour entry for it holds the host end's MAC and is not
// failed, and the node has a route that covers it out of another
// interface (proxy ARP answers only then).
func (d *doctor) checkVirtualGateway(host, pod *netops.Handle, ep store.Endpoint) {
	hl, herr := host.LinkByName(ep.HostVeth)
	neighs, err := pod.NeighDetails(ep.IfName)
	if err != nil || herr != nil {
		d.fail("gateway", "", "neighbour entries of %s in the pod: %v %v", ep.IfName, err, herr)
		return
	}
	nodeRoutes, _ := host.Routes("")
	for _, gw := range ep.Gateways {
		i := slices.IndexFunc(neighs, func(n netops.NeighDetail) bool { return n.IP == gw })
		switch {
		case i < 0 || !bytes.Equal(neighs[i].MAC, hl.MAC):
			fix := fmt.Sprintf("%s neigh replace %s lladdr %s dev %s nud probe", inPod(ep.Netns), gw, hl.MAC, ep.IfName)
			d.fail("gateway", fix, "the pod's neighbour entry for %s does not name %s's MAC %s", gw, ep.HostVeth, hl.MAC)
		case neighs[i].State == "FAILED" || neighs[i].State == "INCOMPLETE":
			d.fail("gateway", "check proxy ARP on "+ep.HostVeth+" and the node's route for "+gw.String(),
				"the pod's neighbour entry for %s is %s: the host end does not answer for it", gw, neighs[i].State)
		case gw.Is4() && !slices.ContainsFunc(nodeRoutes, func(r netops.Route) bool { return r.Dst.Contains(gw) && r.Dev != ep.HostVeth }):
			d.fail("gateway", "give the node a default route", "the node has no route that covers %s, so %s does not answer ARP for it", gw, ep.HostVeth)
		default:
			d.pass("gateway", "%s resolves to %s (%s) by proxy ARP, %s", gw, hl.MAC, ep.HostVeth, neighs[i].State)
		}
	}
}

// azureMode says how an azure-vnet attachment is laid out ("" for other
// roles' records).
func azureMode(ep store.Endpoint) string {
	switch {
	case ep.Plugin != "azure-vnet":
		return ""
	case isTransparent(ep):
		return "transparent (no bridge; the pod's gateway 169.254.1.1 is " + ep.HostVeth + " by proxy ARP, the node routes the pod's addresses to it)"
	}
	return "bridge (" + orDash(ep.Bridge) + " with the node's NIC; the fabric sees the NIC's MAC)"
}
