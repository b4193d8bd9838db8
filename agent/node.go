package agent

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/netops"
)

// underlay is the node's interface toward the other nodes and the addresses
// the overlay uses on it.
type underlay struct {
	Iface string
	MTU   int
	// Addr4/Addr6: the interface's addresses (the VXLAN devices' local
	// address), with their prefix (for DirectRouting: who is on the same
	// L2 network).
	Addr4 netip.Prefix
	Addr6 netip.Prefix
	// Public4/Public6: the addresses published in the lease (other nodes
	// send to them): --public-ip, else the interface's.
	Public4 netip.Addr
	Public6 netip.Addr
}

// findUnderlay resolves --iface (a name or an address), --public-ip and
// --public-ipv6: without --iface, the interface of the default route.
func findUnderlay(h *netops.Handle, iface string, public4, public6 netip.Addr, want4, want6 bool) (underlay, error) {
	links, err := h.Links()
	if err != nil {
		return underlay{}, err
	}
	var u underlay
	if iface == "" {
		routes, err := h.Routes("")
		if err != nil {
			return underlay{}, err
		}
		for _, r := range routes {
			if r.Dst.Bits() != 0 || r.Dev == "" {
				continue
			}
			if r.Dst.Addr().Is4() {
				u.Iface = r.Dev // the IPv4 default route wins
				break
			}
			if u.Iface == "" {
				u.Iface = r.Dev
			}
		}
		if u.Iface == "" {
			return underlay{}, errors.New("no default route to find the interface toward the other nodes: set --iface (a name or an address)")
		}
	} else if a, err := netip.ParseAddr(iface); err == nil {
		// An address: the interface that has it.
		for _, l := range links {
			addrs, err := h.Addrs(l.Name)
			if err != nil {
				continue
			}
			for _, p := range addrs {
				if p.Addr() == a.Unmap() {
					u.Iface = l.Name
				}
			}
		}
		if u.Iface == "" {
			return underlay{}, fmt.Errorf("--iface %s: no interface has this address", iface)
		}
	} else {
		u.Iface = iface
	}
	l, err := h.LinkByName(u.Iface)
	if err != nil {
		return underlay{}, fmt.Errorf("--iface %s: %w", u.Iface, err)
	}
	u.MTU = l.MTU
	addrs, err := h.Addrs(u.Iface)
	if err != nil {
		return underlay{}, err
	}
	for _, p := range addrs {
		switch {
		case p.Addr().Is4() && !u.Addr4.IsValid():
			u.Addr4 = p
		case p.Addr().Is6() && !u.Addr6.IsValid() && p.Addr().IsGlobalUnicast():
			u.Addr6 = p
		}
	}
	u.Public4, u.Public6 = public4, public6
	if !u.Public4.IsValid() {
		u.Public4 = u.Addr4.Addr()
	}
	if !u.Public6.IsValid() {
		u.Public6 = u.Addr6.Addr()
	}
	if want4 && !u.Addr4.IsValid() {
		return underlay{}, fmt.Errorf("interface %s has no IPv4 address for the IPv4 overlay: give it one, or pick another with --iface", u.Iface)
	}
	if want6 && !u.Addr6.IsValid() {
		return underlay{}, fmt.Errorf("interface %s has no global IPv6 address for the IPv6 overlay (EnableIPv6): give it one, or pick another with --iface", u.Iface)
	}
	return u, nil
}
