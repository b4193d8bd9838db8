package ptp

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// plan is the point-to-point layout of one attachment: what goes on the pod
// end, the host end and the node.
type plan struct {
	pod       []netip.Prefix // the pod's addresses, with IPAM's prefix length
	routes    []netops.Route // in the pod, in the order they are added
	hostAddrs []netip.Prefix // the gateways, as /32 or /128, on the host end
	hostRoute []netip.Addr   // the pod's addresses, routed to the host end
}

// planOf works out the layout from IPAM's result and fills res (the ADD
// result) with the pod's addresses (on interface 1), IPAM's routes and DNS.
//
// For a pod address 10.1.0.5/24 with gateway 10.1.0.1 (IPAM's, else the
// first address of the subnet) the pod gets 10.1.0.5/24 without the kernel's
// subnet route, "10.1.0.1 dev eth0 scope link src 10.1.0.5", "10.1.0.0/24 via
// 10.1.0.1 src 10.1.0.5", and IPAM's routes via the gateway; the host end
// gets 10.1.0.1/32 and the node "10.1.0.5 dev <host end> scope host".
func planOf(a *cniplug.Args, c *Conf, ipamRes, res *current.Result) (*plan, error) {
	podIdx := 1
	p := &plan{}
	gws := map[bool]netip.Addr{}
	for _, ipc := range ipamRes.IPs {
		pfx := attach.PrefixOf(ipc.Address)
		addr := pfx.Addr()
		gw := attach.AddrOf(ipc.Gateway)
		if !gw.IsValid() {
			gw = pfx.Masked().Addr().Next()
		}
		if gw == addr || gw.Is4() != addr.Is4() {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "IPAM gave the pod %s with gateway %s: the gateway must be another address of the same family; set ipam's \"gateway\"", pfx, gw)
		}
		if _, seen := gws[addr.Is4()]; !seen {
			gws[addr.Is4()] = gw
		}
		bits := addr.BitLen()
		p.pod = append(p.pod, pfx)
		p.hostAddrs = append(p.hostAddrs, netip.PrefixFrom(gw, bits))
		p.hostRoute = append(p.hostRoute, addr)
		p.routes = append(p.routes, netops.Route{Dst: netip.PrefixFrom(gw, bits), Dev: a.IfName, Src: addr, ScopeLink: true})
		if pfx.Bits() < bits {
			p.routes = append(p.routes, netops.Route{Dst: pfx.Masked(), GW: gw, Dev: a.IfName, Src: addr})
		}
		res.IPs = append(res.IPs, &current.IPConfig{Interface: &podIdx, Address: ipc.Address, Gateway: gw.AsSlice()})
	}
	p.routes = append(p.routes, attach.PodRoutes(a.IfName, ipamRes.Routes, gws)...)
	res.Routes = ipamRes.Routes
	res.DNS = attach.PickDNS(c.DNS, ipamRes.DNS)
	return p, nil
}
