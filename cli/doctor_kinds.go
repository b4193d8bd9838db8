package cli

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// endpointCheck is what the roles' doctor hooks get of ep (pod and pl are
// nil and zero before the pod is opened).
func (d *doctor) endpointCheck(host, pod *netops.Handle, ep store.Endpoint, pl netops.Link) *cniplug.EndpointCheck {
	return &cniplug.EndpointCheck{Reporter: d, Endpoint: ep, Host: host, Pod: pod, PodLink: pl,
		Recreate: recreate, InPod: inPod(ep.Netns)}
}

// virtualGateway reports whether a role's DoctorGateway stands for the ping
// of ep's gateways (asked with no pod: the hook only answers).
func (d *doctor) virtualGateway(ep store.Endpoint) bool {
	for _, k := range d.roles.Known() {
		if k.DoctorGateway != nil && k.DoctorGateway(&cniplug.EndpointCheck{Reporter: d, Endpoint: ep, Recreate: recreate}) {
			return true
		}
	}
	return false
}

// gatewayAt says where ep's gateway is (cniplug.GatewayOnNode, ...): on the
// node for a host veth, where the device role declares for a device in the
// pod, nowhere to ping when a role's hook stands for the ping.
func (d *doctor) gatewayAt(ep store.Endpoint) int {
	switch {
	case d.virtualGateway(ep):
		return cniplug.GatewayNowhere
	case ep.HostVeth != "":
		return cniplug.GatewayOnNode
	}
	if dev := d.roles.PodDeviceOf(ep.Plugin); dev != nil {
		return dev.Gateway
	}
	return cniplug.GatewayOnNode
}

// podLinkKind is the link kind the pod's interface must have ("" = any):
// a veth behind a host veth, or what the device role declares.
func (d *doctor) podLinkKind(ep store.Endpoint) string {
	if ep.HostVeth != "" {
		return "veth"
	}
	dev := d.roles.PodDeviceOf(ep.Plugin)
	switch {
	case dev == nil:
		return ""
	case dev.ExtraKind != "":
		return ep.Extra[dev.ExtraKind]
	}
	return dev.Link
}

// checkHostSide checks the node's side of an endpoint and returns the MTUs
// the pod's interface must agree with (0 = none): a host veth's and its
// bridge's. A role's DoctorHost checks a layout of its own (azure-vnet's
// transparent mode) instead.
func (d *doctor) checkHostSide(host *netops.Handle, ep store.Endpoint) (hostMTU, brMTU int) {
	for _, k := range d.roles.Known() {
		if k.DoctorHost == nil {
			continue
		}
		if mtu, ok := k.DoctorHost(d.endpointCheck(host, nil, ep, netops.Link{})); ok {
			return mtu, 0
		}
	}
	switch {
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
		d.fail("host veth", d.nodeFix("the pod lost its network (deleting a host veth takes the pod's "+ep.IfName+" with it): "+recreate),
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
	ec := d.endpointCheck(host, nil, ep, netops.Link{})
	hl, ok := ec.CheckHostVeth("no bridge: the node routes to the pod through it")
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
	ec.CheckHostRoutes("scope host")
	return hl.MTU
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
// link kind; a linkInContainer device's master in the pod); then every
// role's Doctor hook runs (a vlan's VLAN ID, a tap's bridge in the pod, the
// tables sbr and vrf route the pod through, the MTU tuning set). It returns
// the check, with what the roles do on purpose (Tables, MTUSetBy); nil when
// the interface is not what the role made.
func (d *doctor) checkPodDevice(host, pod *netops.Handle, ep store.Endpoint, pl netops.Link) *cniplug.EndpointCheck {
	if k := d.podLinkKind(ep); k != "" && pl.Kind != k {
		d.fail("interface", recreate, "%s in the pod is a %s device, the record says %s made a %s (something replaced it)",
			ep.IfName, orDash(pl.Kind), orDash(ep.Plugin), k)
		return nil
	}
	if ep.Extra["master"] != "" && ep.Extra["linkInContainer"] == "true" {
		d.checkMaster(pod, ep, "the pod")
	}
	ec := d.endpointCheck(host, pod, ep, pl)
	// The store is open while the hooks run (a chained role reads its
	// record), only then: a CNI call waits for it meanwhile.
	st, err := store.OpenWith(store.Dir(d.view.DataDir), store.Options{NoCreate: true})
	if err == nil {
		ec.Store = st
	}
	d.roles.Doctor(ec)
	if err == nil {
		st.Close()
		ec.Store = nil
	}
	return ec
}

// describeEndpoint is the line ep's role adds on its layout ("" = none).
func describeEndpoint(roles *cniplug.Registry, ep store.Endpoint) string {
	for _, k := range roles.Known() {
		if k.Describe != nil {
			if s := k.Describe(ep); s != "" {
				return s
			}
		}
	}
	return ""
}
