package multi

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// The selection's "default-route", as Multus applies it: once any network
// asks for it, every other network's default route of that family is
// removed from the pod, and the asking network's interface gets a default
// route through the gateways it names. One gateway per family (Multus has
// no ECMP).

// checkGateways marks, when any delegate asks for default-route, which
// delegates lose their IPv4/IPv6 default route (Multus' CheckGatewayConfig):
// every delegate whose request does not name a gateway of that family.
func checkGateways(p *multiPod, ds []*multiDelegate) error {
	asked := false
	v4, v6 := 0, 0
	for _, d := range ds {
		if d.Gateways == nil {
			continue
		}
		asked = true
		for _, g := range *d.Gateways {
			if g.Is4() {
				v4++
			} else {
				v6++
			}
		}
	}
	if !asked {
		return nil
	}
	if v4 > 1 || v6 > 1 {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "pod %s: default-route names %d IPv4 and %d IPv6 gateways across its networks: at most one of each (no ECMP, as in Multus)", p, v4, v6)
	}
	for _, d := range ds {
		d.Filter4, d.Filter6 = true, true
		if d.Gateways == nil {
			continue
		}
		for _, g := range *d.Gateways {
			if g.Is4() {
				d.Filter4 = false
			} else {
				d.Filter6 = false
			}
		}
	}
	return nil
}

// applyGateway changes the pod's default routes after d's ADD (result res)
// and returns res as the record should keep it: the removed default routes
// left out, the added ones in. A result without interfaces and addresses
// is left alone, as in Multus.
func applyGateway(a *cniplug.Args, d *multiDelegate, res types.Result) (types.Result, error) {
	add := d.Gateways != nil && len(*d.Gateways) > 0
	if !d.Filter4 && !d.Filter6 && !add {
		return res, nil
	}
	r, err := current.NewResultFromResult(res)
	if err != nil || (r.Interfaces == nil && r.IPs == nil) {
		return res, nil
	}
	h, err := netops.Open(a.Netns)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "multi: default-route: %w", err)
	}
	defer h.Close()
	routes, err := h.Routes(d.IfName)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "multi: default-route: %w", err)
	}
	// Multus removes every default route of the interface once it filters
	// either family or sets a gateway; so does cnibox, and then adds the
	// requested ones.
	for _, rt := range routes {
		if rt.Dst.IsValid() && rt.Dst.Bits() != 0 || rt.Table != 0 {
			continue
		}
		if err := h.DeleteRoute(rt); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "multi: default-route: remove %s from the pod: %w", rt, err)
		}
	}
	var kept []*types.Route
	for _, rt := range r.Routes {
		if isDefault(rt.Dst) {
			continue
		}
		kept = append(kept, rt)
	}
	if add {
		for _, g := range *d.Gateways {
			rt := netops.Route{GW: g, Dev: d.IfName}
			if err := h.EnsureRoute(rt); err != nil {
				return nil, cniplug.Errorf(types.ErrIOFailure, "multi: default-route: add %s in the pod: %w", rt, err)
			}
			kept = append(kept, &types.Route{Dst: zeroNet(g), GW: net.IP(g.AsSlice())})
		}
	}
	r.Routes = kept
	out, err := r.GetAsVersion(r.CNIVersion)
	if err != nil {
		return nil, fmt.Errorf("multi: default-route: %w", err)
	}
	return out, nil
}

// zeroNet is the default route's destination of g's family.
func zeroNet(g netip.Addr) net.IPNet {
	if g.Is4() {
		return net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}
