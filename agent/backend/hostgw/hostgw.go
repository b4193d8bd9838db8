// Package hostgw is flannel's host-gw backend: no encapsulation, a route
// "<peer subnet> via <peer public IP> dev <underlay>" per peer and family.
// It needs every node on one L2 network (each peer's public IP on the
// underlay's own prefix) and no NAT between them (the public IP is the
// interface's): a peer that is not on the L2 network cannot be routed to
// this way, and is logged as an error and counted
// (cnibox_agent_peers_unreachable), not programmed into a black hole.
package hostgw

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
)

// Backend is one node's host-gw backend; it has no device.
type Backend struct {
	backend.Deviceless
	log     *slog.Logger
	offLink map[netip.Prefix]netip.Addr // peers' subnets not on the L2 network, with their public IP
}

// New checks that the node can route to its peers directly: its public
// addresses are its interface's own (flannel: "your PublicIP differs from
// interface IP, meaning that probably you're on a NAT").
func New(env backend.Env) (*Backend, error) {
	u, c := env.Under, env.Config
	if c.EnableIPv4 && u.Public4 != u.Addr4.Addr() {
		return nil, fmt.Errorf("%w: host-gw: the public IP %s is not the address %s of interface %s (a NAT between the nodes, or --public-ip): "+
			"host-gw routes to the peers' public IPs directly; drop --public-ip, or use vxlan or wireguard across a NAT", backend.ErrUnusable, u.Public4, u.Addr4.Addr(), u.Iface)
	}
	if c.EnableIPv6 && u.Public6 != u.Addr6.Addr() {
		return nil, fmt.Errorf("%w: host-gw: the public IPv6 %s is not the address %s of interface %s: "+
			"host-gw routes to the peers' public IPs directly; drop --public-ipv6, or use vxlan or wireguard", backend.ErrUnusable, u.Public6, u.Addr6.Addr(), u.Iface)
	}
	return &Backend{Deviceless: backend.Deviceless{Env: env}, log: env.Log, offLink: map[netip.Prefix]netip.Addr{}}, nil
}

// Type is "host-gw".
func (b *Backend) Type() string { return lease.BackendHostGW }

// Publish sets the type; host-gw publishes no backend data.
func (b *Backend) Publish(a *lease.Attrs) { a.BackendType = lease.BackendHostGW }

// Direct reports true: host-gw reaches every peer by a plain route.
func (b *Backend) Direct(lease.Lease) bool { return true }

// Accepts reports whether l is a host-gw lease.
func (b *Backend) Accepts(l lease.Lease) bool { return l.Attrs.BackendType == lease.BackendHostGW }

// Unreachable is how many peers' subnets are off the L2 network.
func (b *Backend) Unreachable() int { return len(b.offLink) }

// routes returns l's routes by family; a subnet whose public IP is off the
// L2 network is left out (and logged once).
func (b *Backend) routes(l lease.Lease) []netops.Route {
	var out []netops.Route
	c, u := b.Env.Config, b.Env.Under
	for _, f := range []struct {
		on      bool
		sn      netip.Prefix
		network netip.Prefix
		gw      netip.Addr
		local   netip.Prefix
	}{{c.EnableIPv4, l.Subnet, c.Network, l.Attrs.PublicIP, u.Addr4}, {c.EnableIPv6, l.Subnet6, c.IPv6Network, l.Attrs.PublicIPv6, u.Addr6}} {
		if !f.on || !f.sn.IsValid() || !f.gw.IsValid() || !f.network.Contains(f.sn.Addr()) {
			continue
		}
		if !f.local.Masked().Contains(f.gw) {
			if old, ok := b.offLink[f.sn]; !ok || old != f.gw {
				b.log.Error("host-gw: a peer is not on this node's L2 network; its pods are unreachable from here (put every node on one L2 network, or use vxlan or wireguard)",
					"subnet", f.sn, "publicIP", f.gw, "iface", u.Iface, "onLink", f.local.Masked())
			}
			b.offLink[f.sn] = f.gw
			continue
		}
		delete(b.offLink, f.sn)
		out = append(out, netops.Route{Dst: f.sn, GW: f.gw, Dev: u.Iface})
	}
	return out
}

// Add routes l's subnets via its public IPs; a route of prev's that l no
// longer has is deleted.
func (b *Backend) Add(h *netops.Handle, l lease.Lease, prev *lease.Lease) error {
	want := b.routes(l)
	if prev != nil {
		for _, sn := range []netip.Prefix{prev.Subnet, prev.Subnet6} {
			if !sn.IsValid() || hasDst(want, sn) {
				continue
			}
			if err := h.DeleteRoute(netops.Route{Dst: sn, Dev: b.Env.Under.Iface}); err != nil {
				return err
			}
		}
	}
	var errs []error
	for _, r := range want {
		errs = append(errs, h.EnsureRoute(r))
	}
	return errors.Join(errs...)
}

// Remove deletes l's routes.
func (b *Backend) Remove(h *netops.Handle, l lease.Lease) error {
	var errs []error
	for _, sn := range []netip.Prefix{l.Subnet, l.Subnet6} {
		if sn.IsValid() {
			delete(b.offLink, sn)
			errs = append(errs, h.DeleteRoute(netops.Route{Dst: sn, Dev: b.Env.Under.Iface}))
		}
	}
	return errors.Join(errs...)
}

// Sync makes the underlay's routes into the cluster networks match peers.
func (b *Backend) Sync(h *netops.Handle, peers []lease.Lease) (removed, added int, err error) {
	want := map[netip.Prefix]netops.Route{}
	b.offLink = map[netip.Prefix]netip.Addr{}
	for _, l := range peers {
		for _, r := range b.routes(l) {
			want[r.Dst] = r
		}
	}
	c := b.Env.Config
	owned := func(r netops.Route) bool { return r.GW.IsValid() && backend.InNetworks(r, c.Network, c.IPv6Network) }
	return backend.SyncRoutes(h, []string{b.Env.Under.Iface}, owned, want)
}

func hasDst(rs []netops.Route, dst netip.Prefix) bool {
	for _, r := range rs {
		if r.Dst == dst {
			return true
		}
	}
	return false
}
