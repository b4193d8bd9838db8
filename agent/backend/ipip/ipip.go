// Package ipip is flannel's ipip backend: IPv4 pod traffic between nodes
// goes IPv4-in-IPv4 through the tunnel flannel.ipip (local address the
// underlay's, any remote), a route "<peer subnet> via <peer public IP> dev
// flannel.ipip onlink" per peer. With DirectRouting a peer on the node's
// own L2 network is reached by a plain route via its public IP on the
// underlay instead, as host-gw would. IPv4 only, as flannel's; nothing is
// published but the type.
package ipip

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
)

// Device is the tunnel's name, as flannel's.
const Device = "flannel.ipip"

// Backend is one node's ipip backend.
type Backend struct {
	env    backend.Env
	direct bool
}

// New checks that the node has an IPv4 underlay.
func New(env backend.Env) (*Backend, error) {
	if !env.Under.Addr4.IsValid() {
		return nil, fmt.Errorf("%w: ipip: interface %s has no IPv4 address to send the tunnel's packets from", backend.ErrUnusable, env.Under.Iface)
	}
	if env.Under.MTU-netconf.IPIPOverhead < 68 {
		return nil, fmt.Errorf("%w: ipip: the MTU %d of %s is too small for IPIP (it takes %d)", backend.ErrUnusable, env.Under.MTU, env.Under.Iface, netconf.IPIPOverhead)
	}
	return &Backend{env: env, direct: env.Config.Backend.DirectRouting}, nil
}

// Type is "ipip".
func (b *Backend) Type() string { return lease.BackendIPIP }

// Devices is flannel.ipip.
func (b *Backend) Devices() []string { return []string{Device} }

// MTU is the interface's less the outer IPv4 header.
func (b *Backend) MTU() int { return b.env.Under.MTU - netconf.IPIPOverhead }

// Accepts reports whether l is an ipip lease.
func (b *Backend) Accepts(l lease.Lease) bool { return l.Attrs.BackendType == lease.BackendIPIP }

// Prepare creates (or fixes) the tunnel.
func (b *Backend) Prepare(h *netops.Handle) error {
	created, err := h.EnsureIPIP(netops.IPIPOpts{Name: Device, Local: b.env.Under.Addr4.Addr(), MTU: b.MTU()})
	if errors.Is(err, netops.ErrNotSupported) {
		return fmt.Errorf("%w: ipip: the kernel has no IPIP tunnels (the ipip module): %w", backend.ErrUnusable, err)
	}
	if err == nil && created {
		b.env.Log.Info("created the ipip device", "device", Device, "local", b.env.Under.Addr4.Addr(), "mtu", b.MTU())
	}
	return err
}

// Publish sets the type; ipip publishes no data.
func (b *Backend) Publish(a *lease.Attrs) { a.BackendType = lease.BackendIPIP }

// SetLease makes the subnet's first address the tunnel's one address in
// the cluster network (a /32: the source of the node's own packets to pods
// elsewhere).
func (b *Backend) SetLease(h *netops.Handle, own lease.Lease) error {
	want := netip.PrefixFrom(own.Subnet.Addr(), 32)
	addrs, err := h.Addrs(Device)
	if err != nil {
		return err
	}
	for _, p := range addrs {
		if p != want && p.Addr().Is4() {
			if err := h.DeleteAddr(Device, p); err != nil {
				return err
			}
		}
	}
	return h.EnsureAddr(Device, want, netops.AddrOpts{})
}

// route returns l's route; false when l has nothing for this node.
func (b *Backend) route(l lease.Lease) (netops.Route, bool) {
	sn, gw := l.Subnet, l.Attrs.PublicIP
	if !sn.IsValid() || !gw.Is4() || !b.env.Config.Network.Contains(sn.Addr()) {
		return netops.Route{}, false
	}
	if b.direct && b.env.Under.Addr4.Masked().Contains(gw) {
		return netops.Route{Dst: sn, GW: gw, Dev: b.env.Under.Iface}, true
	}
	return netops.Route{Dst: sn, GW: gw, Dev: Device, Onlink: true}, true
}

// Add routes l's subnet (replacing the route of prev's subnet, if another).
func (b *Backend) Add(h *netops.Handle, l lease.Lease, prev *lease.Lease) error {
	r, ok := b.route(l)
	if prev != nil && (!ok || prev.Subnet != l.Subnet) {
		if err := b.Remove(h, *prev); err != nil {
			return err
		}
	}
	if !ok {
		return nil
	}
	return h.EnsureRoute(r)
}

// Remove deletes l's route, through the tunnel or direct.
func (b *Backend) Remove(h *netops.Handle, l lease.Lease) error {
	if !l.Subnet.IsValid() {
		return nil
	}
	return errors.Join(h.DeleteRoute(netops.Route{Dst: l.Subnet, Dev: Device}), h.DeleteRoute(netops.Route{Dst: l.Subnet, Dev: b.env.Under.Iface}))
}

// Sync makes the routes into the cluster network, on the tunnel and (with
// DirectRouting) on the underlay, match peers.
func (b *Backend) Sync(h *netops.Handle, peers []lease.Lease) (removed, added int, err error) {
	want := map[netip.Prefix]netops.Route{}
	for _, l := range peers {
		if r, ok := b.route(l); ok {
			want[r.Dst] = r
		}
	}
	network := b.env.Config.Network
	owned := func(r netops.Route) bool { return r.GW.IsValid() && backend.InNetworks(r, network) }
	devs := []string{Device}
	if b.direct {
		devs = append(devs, b.env.Under.Iface)
	}
	return backend.SyncRoutes(h, devs, owned, want)
}
