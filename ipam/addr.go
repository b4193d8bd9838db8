package ipam

import "net/netip"

// lastAddr is the last address of p (all host bits set).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// inside reports whether a is in [lo, hi].
func inside(a, lo, hi netip.Addr) bool {
	return a.BitLen() == lo.BitLen() && !a.Less(lo) && !hi.Less(a)
}
