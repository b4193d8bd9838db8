package attach

import (
	"net"
	"net/netip"
)

// PrefixOf converts a result address to netip form.
func PrefixOf(n net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	a = a.Unmap()
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones)
}

// AddrOf converts a result IP to netip form (the zero Addr for nil).
func AddrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// IPNet converts a prefix to the result's form.
func IPNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
