package policymodel

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
)

// SetID names an address set. It is a hash of the set's definition (Set.Key,
// SetIDOf), the same in every agent and across restarts, so the nftables
// side can name its set after it and find it again.
type SetID string

// SetIDOf is the ID of the set defined by key.
func SetIDOf(key string) SetID {
	return SetID("s" + ShortID(key)[:15])
}

// SetKind says what a set's elements are.
type SetKind uint8

const (
	// Addrs: pod addresses (Elem.Prefix is a single address).
	Addrs SetKind = iota
	// CIDRs: prefixes (an ipBlock's cidr minus its excepts, or a
	// ClusterNetworkPolicy's networks): an interval set.
	CIDRs
	// Ported: (address, protocol, port) of the named ports of pods,
	// resolved per pod: matched against the connection's destination.
	Ported
	// Pairs: (pod, destination) address pairs of a domainNames peer: the
	// addresses a pod resolved for one of the peer's names, each for as
	// long as its answer's TTL allows. The engine never fills them: the
	// agent's DNS proxy adds elements, and the kernel expires them.
	Pairs
)

// Elem is one element of a set. Port and Proto are zero but in a Ported
// set; Src is zero but in a Pairs set (the pod; Prefix is the
// destination's single address).
type Elem struct {
	Prefix netip.Prefix
	Proto  Protocol
	Port   uint16
	Src    netip.Addr
}

// PairElem is the element of pod's pair with destination dst.
func PairElem(pod, dst netip.Addr) Elem {
	return Elem{Prefix: netip.PrefixFrom(dst, dst.BitLen()), Src: pod}
}

func (e Elem) String() string {
	if e.Src.IsValid() {
		return fmt.Sprintf("%s . %s", e.Src, e.Prefix.Addr())
	}
	if e.Proto == 0 {
		return e.Prefix.String()
	}
	return fmt.Sprintf("%s . %s . %d", e.Prefix.Addr(), e.Proto, e.Port)
}

// AddrElem is the element of a single address a.
func AddrElem(a netip.Addr) Elem { return Elem{Prefix: netip.PrefixFrom(a, a.BitLen())} }

// CompareElem orders elements by address, prefix length, protocol and
// port.
func CompareElem(a, b Elem) int {
	if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
		return c
	}
	if a.Prefix.Bits() != b.Prefix.Bits() {
		return a.Prefix.Bits() - b.Prefix.Bits()
	}
	if a.Proto != b.Proto {
		return int(a.Proto) - int(b.Proto)
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	return a.Src.Compare(b.Src)
}

// Set is an address set of the model. Its elements are counted: two pods
// may briefly hold one address (one terminating, one starting), and the
// address stays until both are gone.
//
// A set is copied on write: Clone is a new set sharing the elements (a
// large set's parts, a small one's one part), and the first change of
// either copies the part it changes. The engine hands a model out and
// changes a clone of each of its sets from then on, so a reader keeps a
// model that never changes (and reads it without the engine's lock) while
// a pod's change costs the engine a part of each set it touches, not the
// set.
type Set struct {
	ID   SetID
	Kind SetKind
	Key  string // the definition, readable: what the nftables comment shows
	n    int    // distinct elements
	// parts hold the elements: one, or more once the set holds more than
	// splitAt (by a hash of the element, about partSize each); tok marks
	// those the set may change in place.
	parts []*setPart
	tok   *setToken
	// ranges are a CIDRs set's prefixes as Contains searches them (nil:
	// not made since the last change).
	ranges atomic.Pointer[[]addrRange]
}

// setToken tells a set's own parts from those it shares (not empty: two
// empty allocations may share an address).
type setToken struct{ _ byte }

type setPart struct {
	tok *setToken
	m   map[Elem]int
}

// A set splits into 64 parts once it holds more than splitAt elements,
// and doubles its parts whenever they hold more than partSize each on
// average: a change of a large set copies a part of a few dozen
// elements and the set's list of parts.
const (
	splitAt  = 512
	partSize = 32
)

// NewSet is a set holding elems once each.
func NewSet(id SetID, kind SetKind, key string, elems ...Elem) *Set {
	s := &Set{ID: id, Kind: kind, Key: key}
	for _, e := range elems {
		s.Add(e)
	}
	return s
}

// Clone is a set with s's elements, sharing them until either changes.
func (s *Set) Clone() *Set {
	c := &Set{ID: s.ID, Kind: s.Kind, Key: s.Key, n: s.n, parts: slices.Clone(s.parts), tok: &setToken{}}
	c.ranges.Store(s.ranges.Load())
	s.tok = &setToken{} // s's next change copies what it shares too
	return c
}

// Has reports whether e is in the set.
func (s *Set) Has(e Elem) bool {
	if len(s.parts) == 0 {
		return false
	}
	return s.parts[s.partOf(e)].m[e] > 0
}

// Len is the number of elements.
func (s *Set) Len() int { return s.n }

// Elems returns the elements, sorted.
func (s *Set) Elems() []Elem {
	out := make([]Elem, 0, s.n)
	for _, p := range s.parts {
		for e := range p.m {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, CompareElem)
	return out
}

// Add counts e in; it reports whether e is new.
func (s *Set) Add(e Elem) bool {
	m := s.own(s.partOf(e))
	m[e]++
	if m[e] > 1 {
		return false
	}
	s.n++
	if s.n > splitAt && s.n > partSize*len(s.parts) {
		s.split(max(64, 2*len(s.parts)))
	}
	return true
}

// Del counts e out; it reports whether e is gone.
func (s *Set) Del(e Elem) bool {
	if !s.Has(e) {
		return false
	}
	m := s.own(s.partOf(e))
	if c := m[e]; c > 1 {
		m[e] = c - 1
		return false
	}
	delete(m, e)
	s.n--
	return true
}

// own returns part i's map for a change, copied first if s shares it.
func (s *Set) own(i int) map[Elem]int {
	s.ranges.Store(nil)
	if s.tok == nil {
		s.tok = &setToken{}
	}
	if len(s.parts) == 0 {
		s.parts = []*setPart{{tok: s.tok, m: map[Elem]int{}}}
	}
	if p := s.parts[i]; p.tok != s.tok {
		s.parts[i] = &setPart{tok: s.tok, m: maps.Clone(p.m)}
	}
	return s.parts[i].m
}

// split spreads the elements over n parts (new maps: the old parts may
// be shared).
func (s *Set) split(n int) {
	old := s.parts
	s.parts = make([]*setPart, n)
	for i := range s.parts {
		s.parts[i] = &setPart{tok: s.tok, m: make(map[Elem]int, s.n/n+1)}
	}
	for _, p := range old {
		for e, c := range p.m {
			s.parts[s.partOf(e)].m[e] = c
		}
	}
}

// partOf is the index of the part that holds e.
func (s *Set) partOf(e Elem) int {
	if len(s.parts) <= 1 {
		return 0
	}
	h := uint64(e.Port)<<8 | uint64(e.Proto)
	for _, a := range [2]netip.Addr{e.Prefix.Addr(), e.Src} {
		for _, x := range a.As16() {
			h = (h ^ uint64(x)) * 0x100000001b3 // FNV-1a's step
		}
	}
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	return int((h >> 32) % uint64(len(s.parts)))
}

// Contains reports whether the set holds a: as an element of an Addrs
// set, in a prefix of a CIDRs set (as netip.Prefix.Contains: an IPv4
// address in no IPv6 prefix, an IPv4-mapped one in no IPv4 prefix, a
// zoned one in none). A CIDRs set answers from its prefixes as sorted,
// merged address ranges, made at the first call after a change: a binary
// search, where it tried every prefix (16,000 of them: 0.2-0.4 ms a call,
// 4,095 calls an Evaluate of issue 60's finding 5; docs/benchmarks.md).
func (s *Set) Contains(a netip.Addr) bool {
	if s.Kind != CIDRs {
		return s.Has(AddrElem(a))
	}
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	rs := s.addrRanges()
	// The first range that ends at or after a; a is in it if it starts at
	// or before a.
	i, _ := slices.BinarySearchFunc(rs, a, func(r addrRange, a netip.Addr) int { return r.last.Compare(a) })
	return i < len(rs) && rs[i].first.Compare(a) <= 0
}

// addrRange is the addresses first..last, of one family.
type addrRange struct{ first, last netip.Addr }

// addrRanges are the set's prefixes as sorted, merged ranges (IPv4 ones
// first: netip orders the families so), made once per change of the set;
// safe for concurrent use with other readers.
func (s *Set) addrRanges() []addrRange {
	if rs := s.ranges.Load(); rs != nil {
		return *rs
	}
	var rs []addrRange
	for _, p := range s.parts {
		for e := range p.m {
			if e.Prefix.IsValid() {
				rs = append(rs, addrRange{e.Prefix.Masked().Addr(), lastAddr(e.Prefix)})
			}
		}
	}
	slices.SortFunc(rs, func(a, b addrRange) int { return a.first.Compare(b.first) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 {
			// Within the last range, or right after it (Next of the
			// family's last address is invalid: no merge across).
			if prev := &out[n-1]; r.first.Compare(prev.last) <= 0 || prev.last.Next() == r.first {
				if r.last.Compare(prev.last) > 0 {
					prev.last = r.last
				}
				continue
			}
		}
		out = append(out, r)
	}
	out = slices.Clip(out)
	s.ranges.Store(&out)
	return out
}

// lastAddr is the last address of prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	for i := p.Bits() + 128 - p.Addr().BitLen(); i < 128; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	if p.Addr().Is4() {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}
