package cli

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Where an endpoint's gateway is, which says what a gateway that does not
// answer a ping means.
const (
	gwOnNode  = iota // the bridge or the host veth: a fault of this node
	gwOffNode        // a router of the master's LAN: maybe not this node's fault
	gwNowhere        // nothing answers (dummy, tap): not pinged
)

// epKind is what doctor expects of one kind of endpoint record.
type epKind struct {
	// link is the pod's interface's link kind ("" = any).
	link string
	// gatewayAt says where the gateway is (gwOnNode, ...).
	gatewayAt int
}

// kindOf classifies an endpoint record by the role that wrote it: a veth
// with its host end (bridge, ptp and the roles built like them), a device of
// a master (macvlan, ipvlan, vlan), a device moved into the pod
// (host-device), or one with nothing behind it (dummy, tap).
func kindOf(ep store.Endpoint) epKind {
	switch {
	case isTransparent(ep):
		return epKind{link: "veth", gatewayAt: gwNowhere} // checkVirtualGateway stands for the ping
	case ep.HostVeth != "":
		return epKind{link: "veth", gatewayAt: gwOnNode}
	case ep.Plugin == "macvlan", ep.Plugin == "ipvlan", ep.Plugin == "vlan":
		return epKind{link: ep.Plugin, gatewayAt: gwOffNode}
	case ep.Plugin == "host-device":
		return epKind{link: ep.Extra["kind"], gatewayAt: gwOffNode}
	case ep.Plugin == "dummy":
		return epKind{link: "dummy", gatewayAt: gwNowhere}
	case ep.Plugin == "tap":
		return epKind{link: "tun", gatewayAt: gwNowhere}
	}
	return epKind{gatewayAt: gwOnNode}
}

// checkHostSide checks the node's side of an endpoint and returns the MTUs
// the pod's interface must agree with (0 = none): a host veth's and its
// bridge's.
func (d *doctor) checkHostSide(host *netops.Handle, ep store.Endpoint) (hostMTU, brMTU int) {
	switch {
	case isTransparent(ep):
		return d.checkTransparentHost(host, ep), 0
	case ep.HostVeth != "" && ep.Bridge != "":
		return d.checkBridgePort(host, ep)
	case ep.HostVeth != "":
		return d.checkRoutedVeth(host, ep), 0
	case ep.Extra["master"] != "" && ep.Extra["linkInContainer"] != "true":
		d.checkMaster(host, ep, "the node")
	}
	return 0, 0
}

// checkBridgePort: the host veth is up and a port of the endpoint's bridge.
func (d *doctor) checkBridgePort(host *netops.Handle, ep store.Endpoint) (hostMTU, brMTU int) {
	hl, err := host.LinkByName(ep.HostVeth)
	if err != nil {
		d.fail("host veth", "the pod lost its network (deleting a host veth takes the pod's "+ep.IfName+" with it): "+recreate,
			"%s is missing from the node", ep.HostVeth)
		return 0, 0
	}
	br, berr := host.LinkByName(ep.Bridge)
	switch {
	case berr == nil && hl.MasterIndex != br.Index:
		d.fail("host veth", fmt.Sprintf("ip link set %s master %s", ep.HostVeth, ep.Bridge), "%s is not a port of bridge %s", ep.HostVeth, ep.Bridge)
	case !hl.Up:
		d.fail("host veth", "ip link set "+ep.HostVeth+" up", "%s is down", ep.HostVeth)
	default:
		d.pass("host veth", "%s is up and a port of %s", ep.HostVeth, ep.Bridge)
	}
	if berr == nil {
		brMTU = br.MTU
	}
	return hl.MTU, brMTU
}

// checkRoutedVeth: a host veth without a bridge (ptp) is up, holds the
// pod's gateways (/32, /128) and the node routes each pod address to it.
func (d *doctor) checkRoutedVeth(host *netops.Handle, ep store.Endpoint) int {
	hl, ok := d.checkHostVethUp(host, ep, "no bridge: the node routes to the pod through it")
	if !ok {
		return 0
	}
	addrs, err := host.Addrs(ep.HostVeth)
	if err != nil {
		d.fail("host address", "", "list addresses of %s: %v", ep.HostVeth, err)
	}
	for _, gw := range ep.Gateways {
		want := netip.PrefixFrom(gw, gw.BitLen())
		if slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Addr() == gw }) {
			d.pass("host address", "%s holds the pod's gateway %s", ep.HostVeth, gw)
		} else {
			d.fail("host address", fmt.Sprintf("ip addr add %s dev %s", want, ep.HostVeth),
				"%s lacks the pod's gateway %s (has %s): the pod's packets have no next hop", ep.HostVeth, gw, orDash(joinStrings(addrs)))
		}
	}
	d.checkHostRoutes(host, ep, "scope host")
	return hl.MTU
}

// checkHostVethUp: the endpoint's host veth (on no bridge, as note says)
// exists and is up. It returns the link and whether it exists.
func (d *doctor) checkHostVethUp(host *netops.Handle, ep store.Endpoint, note string) (netops.Link, bool) {
	hl, err := host.LinkByName(ep.HostVeth)
	if err != nil {
		d.fail("host veth", "the pod lost its network (deleting a host veth takes the pod's "+ep.IfName+" with it): "+recreate,
			"%s is missing from the node", ep.HostVeth)
		return hl, false
	}
	if !hl.Up {
		d.fail("host veth", "ip link set "+ep.HostVeth+" up", "%s is down", ep.HostVeth)
	} else {
		d.pass("host veth", "%s is up (%s)", ep.HostVeth, note)
	}
	return hl, true
}

// checkHostRoutes: the node routes each pod address to the host veth (the
// fix adds the route with the words how: "scope host", "proto static").
func (d *doctor) checkHostRoutes(host *netops.Handle, ep store.Endpoint, how string) {
	routes, err := host.Routes(ep.HostVeth)
	if err != nil {
		d.fail("host route", "", "list routes of %s: %v", ep.HostVeth, err)
	}
	for _, p := range ep.IPs {
		want := netip.PrefixFrom(p.Addr(), p.Addr().BitLen())
		if slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst == want && r.Table == 0 }) {
			d.pass("host route", "%s dev %s", want, ep.HostVeth)
		} else {
			d.fail("host route", fmt.Sprintf("ip route add %s dev %s %s", want, ep.HostVeth, how),
				"the node has no route %s dev %s: nothing reaches the pod", want, ep.HostVeth)
		}
	}
}

// checkMaster: the master of a macvlan, ipvlan or vlan device exists and is
// up in h's namespace (where says which).
func (d *doctor) checkMaster(h *netops.Handle, ep store.Endpoint, where string) {
	m := ep.Extra["master"]
	l, err := h.LinkByName(m)
	switch {
	case err != nil:
		d.fail("master", "the pod's "+ep.IfName+" went with it: bring the interface back, then "+recreate,
			"master %s of the %s device is missing from %s", m, ep.Plugin, where)
	case !l.Up:
		d.fail("master", "ip link set "+m+" up", "master %s is down in %s: the pod's %s has no link", m, where, ep.IfName)
	default:
		d.pass("master", "%s is up in %s (mtu %d)", m, where, l.MTU)
	}
}

// checkPodDevice: the pod's interface is what the record's role made (its
// link kind; a vlan's VLAN ID; a tap's bridge in the pod; a linkInContainer
// device's master in the pod).
func (d *doctor) checkPodDevice(pod *netops.Handle, ep store.Endpoint, pl netops.Link) {
	k := kindOf(ep)
	if k.link != "" && pl.Kind != k.link {
		d.fail("interface", recreate, "%s in the pod is a %s device, the record says %s made a %s (something replaced it)",
			ep.IfName, orDash(pl.Kind), orDash(ep.Plugin), k.link)
		return
	}
	if ep.Extra["master"] != "" && ep.Extra["linkInContainer"] == "true" {
		d.checkMaster(pod, ep, "the pod")
	}
	if want := ep.Extra["vlanId"]; ep.Plugin == "vlan" && want != "" {
		v, err := pod.VlanByName(ep.IfName)
		switch {
		case err != nil:
			d.fail("vlan", "", "read the VLAN ID of %s in the pod: %v", ep.IfName, err)
		case strconv.Itoa(v.ID) != want:
			d.fail("vlan", recreate, "%s in the pod tags VLAN %d, the record says %s", ep.IfName, v.ID, want)
		default:
			d.pass("vlan", "%s in the pod tags VLAN %d of %s", ep.IfName, v.ID, orDash(ep.Extra["master"]))
		}
	}
	if br := ep.Extra["bridge"]; ep.Plugin == "tap" && br != "" {
		b, err := pod.LinkByName(br)
		switch {
		case err != nil:
			d.fail("tap bridge", recreate, "bridge %s is missing in the pod", br)
		case pl.MasterIndex != b.Index:
			d.fail("tap bridge", fmt.Sprintf("%s link set %s master %s", inPod(ep.Netns), ep.IfName, br), "%s is not a port of bridge %s in the pod", ep.IfName, br)
		default:
			d.pass("tap bridge", "%s is a port of bridge %s in the pod", ep.IfName, br)
		}
	}
	if dev := ep.Extra["device"]; ep.Plugin == "host-device" && dev != "" {
		d.pass("device", "the node's %s is in the pod as %s (DEL gives it back under its name)", dev, ep.IfName)
	}
}
