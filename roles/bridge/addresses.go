package bridge

import (
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
)

// addrPlan is what applyAddresses puts in the kernel: the pod's addresses
// and routes and, with isGateway, the gateways on the bridge.
type addrPlan struct {
	addrs    []netip.Prefix
	gateways []netip.Prefix // for the bridge (isGateway)
	routes   []netops.Route
}

// planAddresses works out from IPAM's result what the pod gets, and fills
// res's IPs, routes and DNS with it.
func planAddresses(a *cniplug.Args, c *Conf, ipamRes, res *current.Result) *addrPlan {
	p := &addrPlan{}
	var gws map[bool]netip.Addr // the first gateway of each family, by is4
	p.addrs, gws = attach.PodAddrs(ipamRes, res, 2)
	if c.IsGateway {
		for i, ipc := range ipamRes.IPs {
			if gw := attach.AddrOf(ipc.Gateway); gw.IsValid() {
				p.gateways = append(p.gateways, netip.PrefixFrom(gw, p.addrs[i].Bits()))
			}
		}
	}
	routes := append([]*types.Route(nil), ipamRes.Routes...)
	if c.IsDefaultGW {
		for _, is4 := range []bool{true, false} {
			gw, ok := gws[is4]
			if !ok {
				continue
			}
			dst := netip.MustParsePrefix("::/0")
			if is4 {
				dst = netip.MustParsePrefix("0.0.0.0/0")
			}
			if !slices.ContainsFunc(routes, func(r *types.Route) bool { return attach.PrefixOf(r.Dst) == dst }) {
				routes = append(routes, &types.Route{Dst: attach.IPNet(dst), GW: gw.AsSlice()})
			}
		}
	}
	// The pod's routes without a gateway go via the address's gateway; the
	// result lists them as IPAM gave them, without one, as the reference
	// does (only the default routes added here name it).
	p.routes = attach.PodRoutes(a.IfName, routes, gws)
	res.Routes = routes
	res.DNS = ipamRes.DNS
	return p
}

// recordGateways writes into the endpoint record's routes the gateway each
// goes via in the pod (IPAM's routes without one go via the address's
// gateway): the record says what the kernel has, for `cnibox doctor` and
// `inspect`, while the result lists the routes as IPAM gave them.
func (p *addrPlan) recordGateways(ep *store.Endpoint) {
	for i := range ep.Routes {
		if i < len(p.routes) && !ep.Routes[i].GW.IsValid() {
			ep.Routes[i].GW = p.routes[i].GW
		}
	}
}

// applyAddresses puts the plan's addresses and routes on the pod interface
// and, with isGateway, the gateways on the bridge.
func applyAddresses(host, pod *netops.Handle, a *cniplug.Args, c *Conf, p *addrPlan) error {
	if err := attach.EnsurePodAddrs(pod, a.IfName, p.addrs, netops.AddrOpts{NoDAD: !c.EnableDad}); err != nil {
		return err
	}
	gwLink := c.Bridge
	if c.Vlan != 0 && len(p.gateways) > 0 {
		// The gateway of a VLAN lives on "<bridge>.<vid>", in that VLAN.
		l, err := host.EnsureBridgeVlanLink(c.Bridge, c.Vlan)
		if err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "vlan %d gateway: %w", c.Vlan, err)
		}
		gwLink = l
	}
	for _, gw := range p.gateways {
		if err := ensureGatewayAddr(host, c, gwLink, gw); err != nil {
			return err
		}
	}
	if err := attach.EnsurePodRoutes(pod, p.routes); err != nil {
		return err
	}
	if c.IsGateway {
		// Forwarding for the families that have a gateway.
		return attach.EnableForwarding(host, p.gateways)
	}
	return nil
}

// ensureGatewayAddr puts gw on link (the bridge, or its VLAN interface).
// Another address of the same subnet there is an error unless forceAddress,
// which replaces it.
func ensureGatewayAddr(host *netops.Handle, c *Conf, link string, gw netip.Prefix) error {
	have, err := host.Addrs(link)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "list addresses of %q: %w", link, err)
	}
	for _, p := range have {
		if p == gw {
			return nil
		}
		if p.Addr().Is4() != gw.Addr().Is4() || !p.Overlaps(gw) || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if !c.ForceAddress {
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "%q already has address %s, not the gateway %s: set \"forceAddress\": true to replace it, or fix the ipam gateway", link, p, gw)
		}
		if err := host.DeleteAddr(link, p); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "remove old gateway %s from %q: %w", p, link, err)
		}
	}
	if err := host.EnsureAddr(link, gw, netops.AddrOpts{NoDAD: true}); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "add gateway %s to %q: %w", gw, link, err)
	}
	return nil
}
