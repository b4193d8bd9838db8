package netops

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AddrOpts are the options of EnsureAddr.
type AddrOpts struct {
	NoDAD bool // IPv6: skip duplicate address detection (IFA_F_NODAD)
	// NoPrefixRoute: the kernel adds no route to the address's subnet
	// (IFA_F_NOPREFIXROUTE); the caller routes it.
	NoPrefixRoute bool
}

// EnsureAddr adds the address p (address and prefix length, e.g.
// 10.1.0.5/24) to the interface link. An address that is already there is
// left as it is.
func (h *Handle) EnsureAddr(link string, p netip.Prefix, o AddrOpts) error {
	ipnet, err := toIPNet(p)
	if err != nil {
		return fmt.Errorf("add address to %q: %w", link, err)
	}
	a := &netlink.Addr{IPNet: ipnet}
	if o.NoDAD && p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if o.NoPrefixRoute {
		a.Flags |= unix.IFA_F_NOPREFIXROUTE
	}
	err = h.withLinkIndex(link, func(idx int) error {
		err := h.nlh.AddrAdd(indexOnly(idx), a)
		if errors.Is(err, unix.EEXIST) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("add address %s to %q in %s: %w", p, link, h.where(), classify(err))
	}
	return nil
}

// DeleteAddr removes the address p from the interface link. It returns nil
// when the address or the interface is not there.
func (h *Handle) DeleteAddr(link string, p netip.Prefix) error {
	ipnet, err := toIPNet(p)
	if err != nil {
		return fmt.Errorf("delete address from %q: %w", link, err)
	}
	err = h.withLinkIndex(link, func(idx int) error {
		return h.nlh.AddrDel(indexOnly(idx), &netlink.Addr{IPNet: ipnet})
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete address %s from %q in %s: %w", p, link, h.where(), classify(err))
	}
	return nil
}

// Addrs returns the IPv4 and IPv6 addresses of the interface link ("" = all
// interfaces), without IPv6 link-local addresses.
func (h *Handle) Addrs(link string) ([]netip.Prefix, error) {
	return h.addrs(link, false)
}

// AllAddrs is Addrs including IPv6 link-local addresses.
func (h *Handle) AllAddrs(link string) ([]netip.Prefix, error) {
	return h.addrs(link, true)
}

func (h *Handle) addrs(link string, linkLocal bool) ([]netip.Prefix, error) {
	var list []netlink.Addr
	dump := func(l netlink.Link) error {
		var err error
		list, err = retryDump(func() ([]netlink.Addr, error) { return h.nlh.AddrList(l, netlink.FAMILY_ALL) })
		return err
	}
	var err error
	if link == "" {
		err = dump(nil)
	} else {
		err = h.withLinkIndex(link, func(idx int) error { return dump(indexOnly(idx)) })
	}
	if err != nil {
		return nil, fmt.Errorf("list addresses of %q in %s: %w", link, h.where(), classify(err))
	}
	out := make([]netip.Prefix, 0, len(list))
	for _, a := range list {
		p, ok := fromIPNet(a.IPNet)
		if !ok {
			continue
		}
		if !linkLocal && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// toIPNet converts a prefix that keeps its address bits (10.1.0.5/24) to
// the net.IPNet netlink wants.
func toIPNet(p netip.Prefix) (*net.IPNet, error) {
	if !p.IsValid() {
		return nil, fmt.Errorf("invalid prefix %v", p)
	}
	a := p.Addr().Unmap()
	bits := p.Bits()
	if bits > a.BitLen() {
		return nil, fmt.Errorf("invalid prefix %v", p)
	}
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}, nil
}

// fromIPNet converts a net.IPNet from netlink to a prefix.
func fromIPNet(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 || bits != a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

// fromIP converts a net.IP to an address; the zero Addr for nil.
func fromIP(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// toIP converts an address to a net.IP; nil for the zero Addr.
func toIP(a netip.Addr) net.IP {
	if !a.IsValid() {
		return nil
	}
	return a.Unmap().AsSlice()
}
