package nodestate

import (
	"cmp"
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// routedVeth fills in r for a host veth of layout on no bridge, as the
// layout's Routed role leaves it: the node routes each pod address (/32,
// /128) to it, and the pod's gateways are the veth's addresses (ptp) or
// what the layout's Unbridged says (azure-vnet's transparent mode: the
// virtual gateways). A veth without a route to any of its peer's
// addresses, or of a layout with no role on no bridge, is not the role's:
// false.
func routedVeth(host *netops.Handle, layout *cniplug.HostVeth, veth string, r *Recovered, warn func(string, ...any)) bool {
	if layout.Routed == "" {
		warn("veth %s is on no bridge, where %s leaves none of its veths: skipped", veth, layout.Plugin)
		return false
	}
	if !routesPeer(host, veth, cmp.Or(layout.RoutedKey, layout.Routed), r, warn) {
		return false
	}
	r.Plugin, r.Bridge = layout.Routed, ""
	if layout.Unbridged != nil {
		r.Gateways, r.Routes, r.Extra = layout.Unbridged(r.IPs)
		return true
	}
	addrs, _ := host.Addrs(veth)
	for _, a := range addrs {
		r.Gateways = append(r.Gateways, a.Addr())
	}
	return true
}

// routesPeer reports whether the node routes any of the peer's addresses
// r.IPs (as /32, /128) to veth, a host veth of role on no bridge; it warns
// about each address it does not route, and when none is, that the veth
// is skipped.
func routesPeer(host *netops.Handle, veth, role string, r *Recovered, warn func(string, ...any)) bool {
	routes, err := host.Routes(veth)
	if err != nil {
		warn("veth %s on no bridge: %v: skipped", veth, err)
		return false
	}
	var routed []netip.Prefix
	for _, p := range r.IPs {
		dst := netip.PrefixFrom(p.Addr(), p.Addr().BitLen())
		if slices.ContainsFunc(routes, func(rt netops.Route) bool { return rt.Dst == dst && rt.Table == 0 }) {
			routed = append(routed, p)
		} else {
			warn("veth %s (%s): the node has no route %s to it: that address is recorded but `cnibox doctor` will fail its host route", veth, role, dst)
		}
	}
	if len(routed) == 0 {
		warn("veth %s is on no bridge and the node routes none of its peer's addresses %v to it (not a %s attachment): skipped", veth, r.IPs, role)
		return false
	}
	return true
}

// cachedDevice is the attachment of libcni's cache entry a whose interface
// is still in its namespace, when its main plugin is a device role (one
// that declares a PodDevice: its interface is a device in the pod, which
// names no owner, so only a libcni cache entry finds it again) or its IPAM
// keeps its reservations in the store (cniplug.Known.StoreIPAM, by the
// network's config in the conf dir). A device role's gets an endpoint
// record (Plugin set) with the facts the cached config names that the role
// declares (PodDevice.Facts: master, mode, VLAN ID).
func cachedDevice(roles *cniplug.Registry, a *libcni.NetworkAttachment, byName map[string]netConf) (Recovered, bool) {
	typ := cachedMain(a.Config, "type")["type"]
	dev := roles.PodDeviceOf(typ)
	device := dev != nil
	nc, ok := byName[a.Network]
	storeIPAM := ok && roles.IsStoreIPAM(nc.ipam)
	if (!device && !storeIPAM) || a.NetNS == "" || !store.IsNetns(a.NetNS) {
		return Recovered{}, false
	}
	h, err := netops.Open(a.NetNS)
	if err != nil {
		return Recovered{}, false
	}
	defer h.Close()
	l, lerr := h.LinkByName(a.IfName)
	addrs, aerr := h.Addrs(a.IfName)
	if lerr != nil || aerr != nil || (!device && len(addrs) == 0) {
		return Recovered{}, false
	}
	r := Recovered{Endpoint: store.Endpoint{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.NetNS,
		MAC: l.MAC.String(), IPs: addrs}, Pod: cachedPod(a), Source: "cache", Reserve: storeIPAM}
	if device {
		r.Plugin, r.Extra = typ, cachedMain(a.Config, dev.Facts...)
	}
	return r, true
}

// cachedMain returns the fields named of the first plugin of a cached
// config (a conflist, or a single plugin's config) that are set: strings
// as they are, numbers in decimal.
func cachedMain(conf []byte, fields ...string) map[string]string {
	var main map[string]json.RawMessage
	if json.Unmarshal(conf, &main) != nil {
		return map[string]string{}
	}
	var plugins []json.RawMessage
	if json.Unmarshal(main["plugins"], &plugins) == nil && len(plugins) > 0 {
		return cachedMain(plugins[0], fields...)
	}
	out := map[string]string{}
	for _, f := range fields {
		var s string
		var n json.Number
		switch {
		case json.Unmarshal(main[f], &s) == nil:
			if s != "" {
				out[f] = s
			}
		case json.Unmarshal(main[f], &n) == nil:
			if i, err := n.Int64(); err == nil {
				out[f] = strconv.FormatInt(i, 10)
			}
		}
	}
	return out
}
