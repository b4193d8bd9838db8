// Package wbpool is whereabouts' pool layout (k8snetworkplumbingwg/whereabouts
// v0.9.4), learnt from its source, so that cnibox and whereabouts share
// pools address for address: the names of the IPPool, OverlappingRangeIPReservation
// and NodeSlicePool objects, the allocations keyed by the decimal offset of
// the address from the pool's range, the usable part of a range (range_start,
// range_end, exclude) and the order in which addresses are handed out (the
// lowest free one). It is pure: the whereabouts role (its config) and the
// agent's cluster IPAM (agent/clusteripam) both use it, and it links nothing
// beyond the standard library.
package wbpool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
)

// The API group and version of whereabouts' three CRDs.
const (
	Group   = "whereabouts.cni.cncf.io"
	Version = "v1alpha1"
)

// Allocation is one entry of IPPool.spec.allocations, keyed by offset.
type Allocation struct {
	ContainerID string `json:"id"`
	PodRef      string `json:"podref"`
	IfName      string `json:"ifname,omitempty"`
}

// PoolName is the IPPool object's name for the range rng (a CIDR as
// whereabouts normalizes it, e.g. "10.1.0.0/24"): the range with ":" and "/"
// turned into "-", after "<network_name>-" when the network is named, and
// after "<node>-" for a node's slice (node_slice_size). Whereabouts'
// IPPoolName.
func PoolName(rng, networkName, nodeName string) string {
	n := normalize(rng)
	switch {
	case nodeName != "" && networkName != "":
		return networkName + "-" + nodeName + "-" + n
	case nodeName != "":
		return nodeName + "-" + n
	case networkName != "":
		return networkName + "-" + n
	}
	return n
}

// normalize makes a range or an address a valid object name, as whereabouts'
// normalizeRange and NormalizeIP do.
func normalize(s string) string {
	if strings.HasSuffix(s, ":") {
		s += "0"
	}
	return strings.NewReplacer(":", "-", "/", "-").Replace(s)
}

// ReservationName is the name of the OverlappingRangeIPReservation of ip
// (enable_overlapping_ranges): the address with ":" turned into "-", after
// "<network_name>-" when the network is named. Whereabouts' NormalizeIP.
func ReservationName(ip netip.Addr, networkName string) string {
	n := normalize(ip.String())
	if networkName != "" {
		return networkName + "-" + n
	}
	return n
}

// NodeSlicePoolName is the NodeSlicePool's name of a network: its
// network_name, else the network's name (the config's "name").
func NodeSlicePoolName(networkName, confName string) string {
	if networkName != "" {
		return networkName
	}
	return confName
}

// Offset is the key of ip in a pool whose range starts at base (the
// address of IPPool.spec.range): ip - base, in decimal. Whereabouts keeps
// the low 64 bits of the difference.
func Offset(base, ip netip.Addr) (string, error) {
	if base.Is4() != ip.Is4() {
		return "", fmt.Errorf("%s is not of the family of the pool's range %s", ip, base)
	}
	if ip.Less(base) {
		return "", fmt.Errorf("%s is below the pool's range %s", ip, base)
	}
	b, a := base.As16(), ip.As16()
	lo, _ := bits.Sub64(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:]), 0)
	return strconv.FormatUint(lo, 10), nil
}

// AddrAt is the address of the allocation key off in a pool whose range
// starts at base; false for a key that is not a number or lies past the
// address space (whereabouts skips such keys).
func AddrAt(base netip.Addr, off string) (netip.Addr, bool) {
	n, err := strconv.ParseUint(off, 10, 64)
	if err != nil {
		return netip.Addr{}, false
	}
	if base.Is4() && n >= 1<<32-1 {
		return netip.Addr{}, false
	}
	a := base.As16()
	lo, carry := bits.Add64(binary.BigEndian.Uint64(a[8:]), n, 0)
	hi, over := bits.Add64(binary.BigEndian.Uint64(a[:8]), 0, carry)
	if over != 0 {
		return netip.Addr{}, false
	}
	binary.BigEndian.PutUint64(a[:8], hi)
	binary.BigEndian.PutUint64(a[8:], lo)
	out := netip.AddrFrom16(a)
	if base.Is4() {
		if !out.Is4In6() {
			return netip.Addr{}, false
		}
		out = out.Unmap()
	}
	return out, true
}

// ParsePoolRange reads IPPool.spec.range (or a NodeSlicePool's): the base
// address (as written, which is the network address for every pool
// whereabouts or cnibox writes) and the prefix.
func ParsePoolRange(s string) (base netip.Addr, p netip.Prefix, err error) {
	p, err = netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, netip.Prefix{}, fmt.Errorf("pool range %q: %w", s, err)
	}
	return p.Addr().Unmap(), netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked(), nil
}

// ErrTooSmall is a range with no usable address (an IPv4 /31 or /32, an
// IPv6 /127 or /128): whereabouts hands out neither the network nor the
// broadcast (last) address, in IPv6 too.
var ErrTooSmall = errors.New("the range has no usable address")

// Range is one range of a whereabouts config (a "range" and its
// range_start, range_end and exclude, or an entry of "ipRanges").
type Range struct {
	Prefix  netip.Prefix // masked
	Start   netip.Addr   // range_start; invalid: none
	End     netip.Addr   // range_end; invalid: none
	Exclude []netip.Prefix
}

// Bounds is the first and last address handed out: the first and last
// usable address of the prefix (not its network or broadcast address), with
// Start when it lies between them and End when it lies between the first
// (Start) and the last; a Start or End outside is ignored, as whereabouts'
// GetIPRange does.
func (r Range) Bounds() (first, last netip.Addr, err error) {
	p := r.Prefix.Masked()
	if p.Addr().BitLen()-p.Bits() < 2 {
		return first, last, fmt.Errorf("%s: %w", p, ErrTooSmall)
	}
	first, last = p.Addr().Next(), Broadcast(p).Prev()
	if r.Start.IsValid() && inside(r.Start, first, last) {
		first = r.Start
	}
	if r.End.IsValid() && inside(r.End, first, last) {
		last = r.End
	}
	return first, last, nil
}

func inside(a, lo, hi netip.Addr) bool { return !a.Less(lo) && !hi.Less(a) }

// Broadcast is the last address of p.
func Broadcast(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As16()
	host := p.Addr().BitLen() - p.Bits()
	off := 128 - p.Addr().BitLen() // the v4 address sits in the last 4 bytes
	for i := 0; i < host; i++ {
		bit := 127 - i
		if bit < off {
			break
		}
		a[bit/8] |= 1 << (7 - bit%8)
	}
	out := netip.AddrFrom16(a)
	if p.Addr().Is4() {
		out = out.Unmap()
	}
	return out
}

// Excluded reports whether a lies in one of the excluded prefixes, and the
// last address of that prefix (where whereabouts jumps to).
func (r Range) Excluded(a netip.Addr) (netip.Addr, bool) {
	for _, x := range r.Exclude {
		if x.Contains(a) {
			return Broadcast(x), true
		}
	}
	return netip.Addr{}, false
}

// Usable reports whether a is an address the range hands out (inside the
// bounds, not excluded).
func (r Range) Usable(a netip.Addr) bool {
	first, last, err := r.Bounds()
	if err != nil || !inside(a, first, last) {
		return false
	}
	_, ex := r.Excluded(a)
	return !ex
}

// Lowest returns the lowest address of the range that is neither excluded
// nor taken, as whereabouts' IterateForAssignment picks it; false when every
// one is.
func (r Range) Lowest(taken func(netip.Addr) bool) (netip.Addr, bool) {
	first, last, err := r.Bounds()
	if err != nil {
		return netip.Addr{}, false
	}
	for a := first; a.IsValid() && !last.Less(a); a = a.Next() {
		if end, ex := r.Excluded(a); ex {
			a = end
			continue
		}
		if !taken(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// ParseExclude reads an exclude entry: a CIDR, or one address (a /32 or
// /128).
func ParseExclude(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR nor an IP address", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// DivideRange splits rng into slices of the size node_slice_size gives
// ("/26" or "26"), in address order, as whereabouts' DivideRangeBySize
// (which takes IPv4 only; cnibox divides IPv6 the same way).
func DivideRange(rng netip.Prefix, sliceSize string) ([]netip.Prefix, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(sliceSize), "/"))
	if err != nil {
		return nil, fmt.Errorf("slice size %q is not a prefix length (want e.g. /26)", sliceSize)
	}
	if rng != rng.Masked() {
		return nil, fmt.Errorf("%s is not a network address", rng)
	}
	if n < rng.Bits() || n > rng.Addr().BitLen() {
		return nil, fmt.Errorf("slice size /%d must lie between the range's /%d and /%d", n, rng.Bits(), rng.Addr().BitLen())
	}
	if n-rng.Bits() > 16 {
		return nil, fmt.Errorf("slice size /%d cuts %s into more than 65536 slices: use a larger slice", n, rng)
	}
	count := 1 << (n - rng.Bits())
	out := make([]netip.Prefix, 0, count)
	cur := netip.PrefixFrom(rng.Addr(), n)
	for i := 0; i < count; i++ {
		out = append(out, cur)
		next := Broadcast(cur).Next()
		if !next.IsValid() {
			break
		}
		cur = netip.PrefixFrom(next, n)
	}
	return out, nil
}
