package vxlan

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
)

// overlay is the VXLAN device of one address family and what the backend
// programs on it.
type overlay struct {
	v6      bool
	opts    netops.VXLANOpts // the device; opts.MAC is the VTEP MAC once known
	network netip.Prefix     // the cluster network of this family
	subnet  netip.Prefix     // this node's subnet
	iface   string           // underlay interface
	under   netip.Prefix     // underlay address with its prefix (DirectRouting)
	direct  bool             // DirectRouting
	// learning: Backend.Learning; the kernel learns FDB entries from the
	// traffic it receives, and sync leaves those (not permanent) alone.
	learning bool
	log      *slog.Logger
}

// target is how one peer is reached in this family.
type target struct {
	subnet netip.Prefix
	gw     netip.Addr       // the peer's subnet address (.0), the onlink next hop
	mac    net.HardwareAddr // the peer's VTEP MAC
	dst    netip.Addr       // the peer's public IP
	direct bool             // a plain route via dst on the underlay
}

func (t target) String() string {
	if t.direct {
		return fmt.Sprintf("%s via %s (direct)", t.subnet, t.dst)
	}
	return fmt.Sprintf("%s via %s vtep %s at %s", t.subnet, t.gw, t.mac, t.dst)
}

// target returns how l is reached in this family; false when the lease has
// nothing for it (no subnet, no VTEP MAC, no public IP).
func (o *overlay) target(l lease.Lease) (target, bool) {
	sn, dst, mac := l.Subnet, l.Attrs.PublicIP, l.Attrs.VTEPMAC
	if o.v6 {
		sn, dst, mac = l.Subnet6, l.Attrs.PublicIPv6, l.Attrs.VTEPMAC6
	}
	if !sn.IsValid() || !dst.IsValid() || !o.network.Contains(sn.Addr()) {
		return target{}, false
	}
	t := target{subnet: sn, gw: sn.Addr(), mac: mac, dst: dst}
	if o.direct && o.under.IsValid() && o.under.Contains(dst) {
		t.direct = true
		return t, true
	}
	if len(mac) != 6 {
		return target{}, false
	}
	return t, true
}

// ensureDevice creates (or fixes) the device with its address; created
// reports that it is new, so everything on it must be programmed again.
func (o *overlay) ensureDevice(h *netops.Handle) (created bool, err error) {
	v, created, err := h.EnsureVXLAN(o.opts)
	if err != nil {
		return false, err
	}
	if created {
		o.log.Info("created the vxlan device", "device", o.opts.Name, "vni", v.VNI, "port", v.Port, "local", v.Local, "mac", v.MAC.String(), "mtu", v.MTU)
	}
	o.opts.MAC = v.MAC
	if !o.subnet.IsValid() {
		return created, nil
	}
	want := netip.PrefixFrom(o.subnet.Addr(), o.subnet.Addr().BitLen())
	addrs, err := h.Addrs(o.opts.Name)
	if err != nil {
		return created, err
	}
	for _, p := range addrs {
		if p != want && p.Addr().Is6() == o.v6 {
			if err := h.DeleteAddr(o.opts.Name, p); err != nil {
				return created, err
			}
		}
	}
	return created, h.EnsureAddr(o.opts.Name, want, netops.AddrOpts{NoDAD: true})
}

// add programs one peer: neighbour, then FDB entry, then route (a route is
// usable only once the next hop resolves). old is what was programmed for
// the same subnet before, if anything: an FDB entry of its MAC or public IP
// that the new one does not replace is deleted.
func (o *overlay) add(h *netops.Handle, t target, old *target) error {
	dev := o.opts.Name
	if old != nil && !old.direct && (t.direct || !bytes.Equal(old.mac, t.mac) || old.dst != t.dst) {
		if err := h.DeleteFDB(dev, old.mac, old.dst); err != nil {
			return err
		}
		if t.direct {
			if err := h.DeleteNeigh(dev, old.gw); err != nil {
				return err
			}
			if err := h.DeleteRoute(netops.Route{Dst: old.subnet, GW: old.gw, Dev: dev, Onlink: true}); err != nil {
				return err
			}
		}
	}
	if old != nil && old.direct && !t.direct {
		if err := h.DeleteRoute(netops.Route{Dst: old.subnet, GW: old.dst, Dev: o.iface}); err != nil {
			return err
		}
	}
	if t.direct {
		return h.EnsureRoute(netops.Route{Dst: t.subnet, GW: t.dst, Dev: o.iface})
	}
	if err := h.EnsureNeigh(dev, t.gw, t.mac); err != nil {
		return err
	}
	if err := h.EnsureFDB(dev, t.mac, t.dst); err != nil {
		return err
	}
	return h.EnsureRoute(netops.Route{Dst: t.subnet, GW: t.gw, Dev: dev, Onlink: true})
}

// remove deletes everything programmed for a peer.
func (o *overlay) remove(h *netops.Handle, t target) error {
	if t.direct {
		return h.DeleteRoute(netops.Route{Dst: t.subnet, GW: t.dst, Dev: o.iface})
	}
	dev := o.opts.Name
	return errors.Join(
		h.DeleteRoute(netops.Route{Dst: t.subnet, GW: t.gw, Dev: dev, Onlink: true}),
		h.DeleteNeigh(dev, t.gw),
		h.DeleteFDB(dev, t.mac, t.dst),
	)
}

// sync makes the kernel match targets exactly: whatever is on the device
// (and, with DirectRouting, routes into the cluster network on the underlay
// interface) that belongs to no target is removed, and what is missing is
// added. It returns how many entries it removed and added.
func (o *overlay) sync(h *netops.Handle, targets map[netip.Prefix]target) (removed, added int, err error) {
	dev := o.opts.Name
	wantNeigh := map[netip.Addr]net.HardwareAddr{}
	wantFDB := map[string]netip.Addr{}
	for _, t := range targets {
		if !t.direct {
			wantNeigh[t.gw] = t.mac
			wantFDB[t.mac.String()] = t.dst
		}
	}

	neighs, err := h.Neighs(dev)
	if err != nil {
		return 0, 0, err
	}
	haveNeigh := map[netip.Addr]bool{}
	for _, n := range neighs {
		// Link-local and multicast entries are the kernel's own (e.g.
		// ff02::16, the MLD reports' group, NOARP).
		if n.IP.Is6() != o.v6 || (n.IP.Is6() && (n.IP.IsLinkLocalUnicast() || n.IP.IsMulticast())) {
			continue
		}
		if mac, ok := wantNeigh[n.IP]; ok && n.Permanent && bytes.Equal(mac, n.MAC) {
			haveNeigh[n.IP] = true
			continue
		}
		o.log.Info("removing a stale neighbour", "device", dev, "entry", n.String())
		if err := h.DeleteNeigh(dev, n.IP); err != nil {
			return removed, added, err
		}
		removed++
	}

	fdb, err := h.FDB(dev)
	if err != nil {
		return removed, added, err
	}
	haveFDB := map[string]bool{}
	for _, e := range fdb {
		if o.learning && !e.Permanent {
			continue
		}
		if dst, ok := wantFDB[e.MAC.String()]; ok && dst == e.Dst && !haveFDB[e.MAC.String()] {
			haveFDB[e.MAC.String()] = true
			continue
		}
		o.log.Info("removing a stale fdb entry", "device", dev, "entry", e.String())
		if err := h.DeleteFDB(dev, e.MAC, e.Dst); err != nil {
			return removed, added, err
		}
		removed++
	}

	haveRoute := map[netip.Prefix]bool{}
	routes, err := h.Routes(dev)
	if err != nil {
		return removed, added, err
	}
	// The device's own address: IPv6 keeps a /128 prefix route for it.
	own := netip.PrefixFrom(o.subnet.Addr(), o.subnet.Addr().BitLen())
	for _, r := range routes {
		if r.Dst.Addr().Is6() != o.v6 || r.Table != 0 || isLinkLocalRoute(r) || (o.subnet.IsValid() && r.Dst == own && !r.GW.IsValid()) {
			continue
		}
		if t, ok := targets[r.Dst]; ok && !t.direct && r.GW == t.gw && r.Onlink {
			haveRoute[r.Dst] = true
			continue
		}
		o.log.Info("removing a stale route", "device", dev, "route", r.String())
		if err := h.DeleteRoute(r); err != nil {
			return removed, added, err
		}
		removed++
	}
	if o.direct {
		under, err := h.Routes(o.iface)
		if err != nil {
			return removed, added, err
		}
		for _, r := range under {
			if r.Table != 0 || !r.GW.IsValid() || !o.network.Contains(r.Dst.Addr()) || r.Dst.Bits() <= o.network.Bits() {
				continue
			}
			if t, ok := targets[r.Dst]; ok && t.direct && r.GW == t.dst {
				haveRoute[r.Dst] = true
				continue
			}
			o.log.Info("removing a stale direct route", "iface", o.iface, "route", r.String())
			if err := h.DeleteRoute(r); err != nil {
				return removed, added, err
			}
			removed++
		}
	}

	for _, t := range targets {
		if haveRoute[t.subnet] && (t.direct || (haveNeigh[t.gw] && haveFDB[t.mac.String()])) {
			continue
		}
		if err := o.add(h, t, nil); err != nil {
			return removed, added, err
		}
		added++
	}
	return removed, added, nil
}

// isLinkLocalRoute reports whether r is one the kernel keeps for itself on
// any IPv6 device (fe80::/64, multicast).
func isLinkLocalRoute(r netops.Route) bool {
	a := r.Dst.Addr()
	return a.Is6() && (a.IsLinkLocalUnicast() || a.IsMulticast())
}
