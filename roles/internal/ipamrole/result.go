package ipamrole

import (
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/ipam"
)

// Address is an address of the result with its subnet's prefix length
// (host bits kept) and optional gateway.
type Address struct {
	Addr    netip.Prefix
	Gateway netip.Addr
}

// Allocated returns the addresses the allocator reserved.
func Allocated(allocs []ipam.Allocation) []Address {
	out := make([]Address, len(allocs))
	for i, al := range allocs {
		out[i] = Address{Addr: al.Addr, Gateway: al.Gateway}
	}
	return out
}

// Result is the result of an IPAM ADD: the addresses with their gateways,
// the routes and the DNS settings.
func Result(ips []Address, routes []Route, dns types.DNS) *current.Result {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: dns}
	for _, ip := range ips {
		ipc := &current.IPConfig{Address: IPNet(ip.Addr)}
		if ip.Gateway.IsValid() {
			ipc.Gateway = IP(ip.Gateway)
		}
		res.IPs = append(res.IPs, ipc)
	}
	for _, r := range routes {
		res.Routes = append(res.Routes, r.CNI())
	}
	return res
}

// CNI converts r to the CNI library's route.
func (r Route) CNI() *types.Route {
	out := &types.Route{Dst: IPNet(r.Dst), MTU: r.MTU, AdvMSS: r.AdvMSS, Priority: r.Priority, Table: r.Table, Scope: r.Scope}
	if r.GW.IsValid() {
		out.GW = IP(r.GW)
	}
	return out
}

// IPNet converts a prefix (host bits kept) to the CNI result's form.
func IPNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: IP(p.Addr()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// IP converts an address to the CNI result's form (nil when it is invalid).
func IP(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }
