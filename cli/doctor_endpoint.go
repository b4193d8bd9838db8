package cli

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// pingTimeout bounds the wait for the gateway's answer.
const pingTimeout = 2 * time.Second

// recreate is the fix for damage only a new attachment repairs.
const recreate = "re-create the pod (the runtime's DEL and ADD), or `cnibox exec del` then `cnibox exec add` for a hand-made one"

// checkEndpoint runs the per-endpoint checks.
func (d *doctor) checkEndpoint(host *netops.Handle, ep store.Endpoint, overlays []store.OverlayState) {
	d.at = checkSubject{Subject: ep.Network + "/" + short(ep.ContainerID) + "/" + ep.IfName, Pod: podName(ep)}

	// netns
	if ep.Netns == "" {
		d.warn("netns", "", "the record has no netns path; the pod checks are skipped")
		return
	}
	ok, err := netops.NetnsExists(ep.Netns)
	switch {
	case err != nil:
		d.fail("netns", "", "%s: %v", ep.Netns, err)
		return
	case !ok:
		d.fail("netns", "the pod is gone but its record stayed (the runtime's DEL did not run): `cnibox gc` removes the record, its veth, masquerade entries and addresses",
			"%s is gone", ep.Netns)
		return
	}
	d.pass("netns", "%s exists", ep.Netns)

	// the node's side: the host veth (on its bridge, or with ptp's
	// address and route), or the master of a device
	hostMTU, brMTU := d.checkHostSide(host, ep)

	pod, err := netops.Open(ep.Netns)
	if err != nil {
		d.fail("pod", "", "open %s: %v", ep.Netns, err)
		return
	}
	defer pod.Close()
	ip := inPod(ep.Netns)

	if ep.Extra["dpdk"] == "true" {
		d.pass("device", "a DPDK device (%s): the pod has no interface of it to check", orDash(ep.Extra["pciBusID"]))
		return
	}

	// pod interface
	pl, err := pod.LinkByName(ep.IfName)
	if err != nil {
		d.fail("interface", recreate, "%s is missing in the pod", ep.IfName)
		return
	}
	switch {
	case !pl.Up:
		d.fail("interface", fmt.Sprintf("%s link set %s up", ip, ep.IfName), "%s is down in the pod", ep.IfName)
	case ep.MAC != "" && pl.MAC.String() != ep.MAC:
		d.warn("interface", "", "%s has MAC %s, the record says %s (changed after ADD)", ep.IfName, pl.MAC, ep.MAC)
	default:
		d.pass("interface", "%s is up in the pod (mtu %d, mac %s)", ep.IfName, pl.MTU, pl.MAC)
	}
	ec := d.checkPodDevice(host, pod, ep, pl)
	if ec == nil {
		ec = d.endpointCheck(host, pod, ep, pl)
	}
	for _, k := range d.roles.Known() {
		if k.DoctorGateway != nil && k.DoctorGateway(ec) {
			break // the role checked what stands for the ping
		}
	}

	// addresses
	have, err := pod.Addrs(ep.IfName)
	if err != nil {
		d.fail("address", "", "list addresses of %s: %v", ep.IfName, err)
	}
	for _, p := range ep.IPs {
		if slices.Contains(have, p) {
			d.pass("address", "%s on %s", p, ep.IfName)
		} else {
			d.fail("address", fmt.Sprintf("%s addr add %s dev %s", ip, p, ep.IfName), "%s is missing on %s in the pod (has %s)", p, ep.IfName, orDash(joinStrings(have)))
		}
	}

	// routes: in the main table, or in a table a role routes the pod
	// through on purpose (sbr's, vrf's)
	routes, err := pod.Routes(ep.IfName)
	if err != nil {
		d.fail("route", "", "list routes of %s: %v", ep.IfName, err)
	}
	for _, t := range ec.Tables {
		more, err := pod.TableRoutes(ep.IfName, t)
		if err != nil {
			d.fail("route", "", "list routes of %s in table %d: %v", ep.IfName, t, err)
		}
		routes = append(routes, more...)
	}
	for _, r := range ep.Routes {
		found := slices.ContainsFunc(routes, func(h netops.Route) bool {
			return h.Dst.Masked() == r.Dst.Masked() && (!r.GW.IsValid() || h.GW == r.GW)
		})
		name, desc := "route", r.Dst.String()
		if r.Dst.Bits() == 0 {
			name, desc = "default route", "default"
		}
		if r.GW.IsValid() {
			desc += " via " + r.GW.String()
		}
		if found {
			d.pass(name, "%s dev %s%s", desc, ep.IfName, tableNote(routes, r))
		} else {
			d.fail(name, fmt.Sprintf("%s route add %s dev %s", ip, desc, ep.IfName), "%s is missing in the pod", desc)
		}
	}

	// gateways
	where := d.gatewayAt(ep)
	for _, gw := range ep.Gateways {
		if where == cniplug.GatewayNowhere {
			break // nothing on the other side of a dummy or an unopened tap answers
		}
		src := pingSource(ec, gw)
		rtt, err := pod.PingFrom(src, gw, pingTimeout)
		switch {
		case err == nil:
			d.pass("gateway", "%s answers a ping from inside the pod (%s)", gw, rtt.Round(time.Microsecond))
		case errors.Is(err, netops.ErrNoAnswer) && staleGatewayMAC(host, pod, ep, gw) != "":
			d.fail("gateway", fmt.Sprintf("%s neigh del %s dev %s (the entry also recovers by itself within a minute or so)", ip, gw, ep.IfName),
				"%s does not answer a ping from inside the pod: %s", gw, staleGatewayMAC(host, pod, ep, gw))
		case errors.Is(err, netops.ErrNoAnswer) && where == cniplug.GatewayOffNode:
			d.warn("gateway", fmt.Sprintf("the gateway is a router of %s's network, not of this node: check that it is there and answers ICMP", cmp.Or(ep.Extra["master"], ep.Extra["device"], ep.IfName)),
				"%s does not answer a ping from inside the pod within %s", gw, pingTimeout)
		case errors.Is(err, netops.ErrNoAnswer) && ep.Bridge == "" && ep.HostVeth != "":
			d.fail("gateway", fmt.Sprintf("check that host veth %s is up and holds %s (ip addr show %s), and that nothing on the node drops ICMP", ep.HostVeth, gw, ep.HostVeth),
				"%s does not answer a ping from inside the pod within %s", gw, pingTimeout)
		case errors.Is(err, netops.ErrNoAnswer):
			d.fail("gateway", fmt.Sprintf("check that bridge %s is up and holds %s (ip addr show %s), and that nothing on the node drops ICMP", orDash(ep.Bridge), gw, orDash(ep.Bridge)),
				"%s does not answer a ping from inside the pod within %s", gw, pingTimeout)
		case src.IsValid() && errors.Is(err, syscall.EADDRNOTAVAIL):
			// The pod's address is on an interface of a VRF: a socket of
			// the pod's default VRF cannot take it as its source, and this
			// ping does not bind to the VRF's device (not done yet).
			d.warn("gateway", fmt.Sprintf("check it by hand: %s ip vrf exec <the VRF of %s> ping %s", ip, ep.IfName, gw),
				"%s not checked: the pod's address %s is not usable outside its VRF (%v)", gw, src, err)
		default:
			d.fail("gateway", "the pod has no route to its gateway: check its addresses above", "ping %s from inside the pod: %v", gw, err)
		}
	}

	// masquerade
	if ep.Extra["ipMasq"] == "true" {
		for _, p := range ep.IPs {
			ok, err := host.NFT().HasMasq(p.Addr())
			if err != nil {
				d.fail("masquerade", "", "read the masquerade entry of %s: %v", p.Addr(), err)
				continue
			}
			if ok {
				d.pass("masquerade", "%s is masqueraded (table inet cnibox)", p.Addr())
				continue
			}
			fix := fmt.Sprintf("nft add element inet %s %s '{ %s : jump %s }' (if the chain exists), or %s",
				nft.MasqTable, masqMapOf(p.Addr()), p.Addr(), nft.MasqChain(ep.Network, p.Masked()), recreate)
			d.fail("masquerade", fix, "no masquerade entry for %s: its traffic leaves the node with the pod address", p.Addr())
		}
	}

	d.checkForwards(ec)

	// MTU
	var mtuProblems []string
	mtuNote := ""
	switch {
	case hostMTU > 0 && hostMTU != pl.MTU && ec.MTUSetBy != "":
		mtuNote = fmt.Sprintf(" (set by %s on purpose; host veth %s has mtu %d)", ec.MTUSetBy, ep.HostVeth, hostMTU)
	case hostMTU > 0 && hostMTU != pl.MTU:
		mtuProblems = append(mtuProblems, fmt.Sprintf("host veth %s has mtu %d", ep.HostVeth, hostMTU))
	}
	if brMTU > 0 && pl.MTU > brMTU {
		mtuProblems = append(mtuProblems, fmt.Sprintf("bridge %s has mtu %d", ep.Bridge, brMTU))
	}
	for _, o := range overlays {
		if o.Stopped || o.Lease.MTU == 0 || !slices.ContainsFunc(ep.IPs, func(p netip.Prefix) bool {
			return (o.Lease.Network.IsValid() && o.Lease.Network.Contains(p.Addr())) ||
				(o.Lease.Network6.IsValid() && o.Lease.Network6.Contains(p.Addr()))
		}) {
			continue // the pod's addresses are not in the overlay's cluster network
		}
		if pl.MTU > o.Lease.MTU {
			mtuProblems = append(mtuProblems, fmt.Sprintf("overlay %s has mtu %d", o.Lease.Device, o.Lease.MTU))
		}
	}
	if len(mtuProblems) > 0 {
		d.fail("mtu", "set \"mtu\" in the network config to the smallest of these and re-create the pod",
			"%s in the pod has mtu %d, but %s: large packets are dropped", ep.IfName, pl.MTU, strings.Join(mtuProblems, ", "))
	} else {
		d.pass("mtu", "%d in the pod, consistent with the host veth, bridge and overlay%s", pl.MTU, mtuNote)
	}
}

// pingSource is the address the ping of gw goes from: the pod's own of
// gw's family when a role routes the pod through tables of its own by
// source address (sbr), else the kernel's choice.
func pingSource(ec *cniplug.EndpointCheck, gw netip.Addr) netip.Addr {
	if len(ec.Tables) == 0 {
		return netip.Addr{}
	}
	for _, p := range ec.Endpoint.IPs {
		if p.Addr().Is4() == gw.Is4() {
			return p.Addr()
		}
	}
	return netip.Addr{}
}

// tableNote names the routing table a found route r is in when it is not
// the main one ("" otherwise).
func tableNote(routes []netops.Route, r store.Route) string {
	for _, h := range routes {
		if h.Dst.Masked() == r.Dst.Masked() && (!r.GW.IsValid() || h.GW == r.GW) {
			if h.Table == 0 {
				return ""
			}
			return fmt.Sprintf(" (table %d)", h.Table)
		}
	}
	return ""
}

// staleGatewayMAC explains a gateway that does not answer because the pod's
// neighbour entry for it holds a MAC the bridge no longer has: a bridge
// without a MAC of its own takes the lowest MAC of its ports, so it changes
// when that port leaves, and pods keep sending to the old one until their
// entry expires. It returns "" when that is not the case.
func staleGatewayMAC(host, pod *netops.Handle, ep store.Endpoint, gw netip.Addr) string {
	if ep.Bridge == "" {
		return ""
	}
	br, err := host.LinkByName(ep.Bridge)
	if err != nil {
		return ""
	}
	neighs, err := pod.Neighs(ep.IfName)
	if err != nil {
		return ""
	}
	for _, n := range neighs {
		if n.IP == gw && n.MAC != nil && n.MAC.String() != br.MAC.String() {
			return fmt.Sprintf("the pod's neighbour entry says %s is at %s, but bridge %s now has MAC %s (a bridge without a MAC of its own takes its lowest port's, and it changed when that port left)",
				gw, n.MAC, ep.Bridge, br.MAC)
		}
	}
	return ""
}

// checkOverlays: each overlay device the agent recorded is there and up,
// and every peer is programmed (neighbour, FDB entry and route, or the
// direct route).
func (d *doctor) checkOverlays(host *netops.Handle, overlays []store.OverlayState) {
	for _, o := range overlays {
		if o.Stopped {
			continue
		}
		l := o.Lease
		for _, fam := range []struct {
			v6  bool
			dev string
			mac string
		}{{false, l.Device, l.VTEPMAC}, {true, l.Device6, l.VTEPMAC6}} {
			if fam.dev == "" || (!fam.v6 && !l.Subnet.IsValid()) || (fam.v6 && !l.Subnet6.IsValid()) {
				continue
			}
			d.checkOverlayDevice(host, o, fam.dev, fam.v6)
		}
	}
}

func (d *doctor) checkOverlayDevice(host *netops.Handle, o store.OverlayState, dev string, v6 bool) {
	dl, err := host.LinkByName(dev)
	switch {
	case err != nil:
		d.fail("overlay", "restart cnibox-agent: it re-creates the device and programs the peers", "device %s is missing", dev)
		return
	case !dl.Up:
		d.fail("overlay", "ip link set "+dev+" up", "device %s is down", dev)
		return
	}
	if !o.Ready {
		d.warn("overlay", "see cnibox-agent's log", "device %s is up but the agent says it is not ready", dev)
	} else {
		d.pass("overlay", "device %s is up (mtu %d), agent ready", dev, dl.MTU)
	}
	// The same reading and matching as `cnibox overlay peers`.
	k := ovlReadKernel(host, dev, o.Lease.Iface)
	for _, p := range o.Peers {
		sn, dst, mac := p.Subnet, p.PublicIP, p.VTEPMAC
		if v6 {
			sn, dst, mac = p.Subnet6, p.PublicIPv6, p.VTEPMAC6
		}
		if !sn.IsValid() {
			continue
		}
		has := k.check(sn, dst, mac, p.Direct)
		var missing []string
		if !has.Route {
			if p.Direct {
				missing = append(missing, fmt.Sprintf("route %s via %s", sn, dst))
			} else {
				missing = append(missing, fmt.Sprintf("route %s via %s onlink", sn, sn.Addr()))
			}
		}
		if !has.Neigh {
			missing = append(missing, fmt.Sprintf("neighbour %s lladdr %s", sn.Addr(), mac))
		}
		if !has.FDB {
			missing = append(missing, fmt.Sprintf("fdb %s dst %s", mac, dst))
		}
		if len(missing) == 0 {
			d.pass("peer", "%s at %s is programmed on %s", sn, dst, dev)
		} else {
			d.fail("peer", "restart cnibox-agent (its full sync re-programs every peer)", "%s at %s: missing %s", sn, dst, strings.Join(missing, ", "))
		}
	}
}
