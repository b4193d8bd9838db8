package ipam

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// span is the number of addresses in [a, b] (a <= b, same family),
// saturating at MaxUint64.
func span(a, b netip.Addr) uint64 {
	a16, b16 := a.As16(), b.As16()
	lo, borrow := bits.Sub64(binary.BigEndian.Uint64(b16[8:]), binary.BigEndian.Uint64(a16[8:]), 0)
	hi, _ := bits.Sub64(binary.BigEndian.Uint64(b16[:8]), binary.BigEndian.Uint64(a16[:8]), borrow)
	if hi != 0 || lo == math.MaxUint64 {
		return math.MaxUint64
	}
	return lo + 1
}

func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

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
