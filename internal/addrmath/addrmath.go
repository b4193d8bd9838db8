// Package addrmath counts IP addresses: the size of an address range and
// sums of such sizes, saturating at MaxUint64 (an IPv6 range can hold more
// addresses than a uint64 counts). Both ipam and store count with it.
package addrmath

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// Span is the number of addresses in [a, b] (a <= b, same family),
// saturating at MaxUint64.
func Span(a, b netip.Addr) uint64 {
	a16, b16 := a.As16(), b.As16()
	lo, borrow := bits.Sub64(binary.BigEndian.Uint64(b16[8:]), binary.BigEndian.Uint64(a16[8:]), 0)
	hi, _ := bits.Sub64(binary.BigEndian.Uint64(b16[:8]), binary.BigEndian.Uint64(a16[:8]), borrow)
	if hi != 0 || lo == math.MaxUint64 {
		return math.MaxUint64
	}
	return lo + 1
}

// SatAdd is a + b, saturating at MaxUint64.
func SatAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}
