package policymodel

import (
	"fmt"
	"net/netip"
	"slices"
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
type Set struct {
	ID   SetID
	Kind SetKind
	Key  string // the definition, readable: what the nftables comment shows
	n    map[Elem]int
}

// NewSet is a set holding elems once each.
func NewSet(id SetID, kind SetKind, key string, elems ...Elem) *Set {
	s := &Set{ID: id, Kind: kind, Key: key}
	for _, e := range elems {
		s.Add(e)
	}
	return s
}

// Has reports whether e is in the set.
func (s *Set) Has(e Elem) bool { return s.n[e] > 0 }

// Len is the number of elements.
func (s *Set) Len() int { return len(s.n) }

// Elems returns the elements, sorted.
func (s *Set) Elems() []Elem {
	out := make([]Elem, 0, len(s.n))
	for e := range s.n {
		out = append(out, e)
	}
	slices.SortFunc(out, CompareElem)
	return out
}

// Add counts e in; it reports whether e is new.
func (s *Set) Add(e Elem) bool {
	if s.n == nil {
		s.n = map[Elem]int{}
	}
	s.n[e]++
	return s.n[e] == 1
}

// Del counts e out; it reports whether e is gone.
func (s *Set) Del(e Elem) bool {
	c, ok := s.n[e]
	if !ok {
		return false
	}
	if c <= 1 {
		delete(s.n, e)
		return true
	}
	s.n[e] = c - 1
	return false
}

// Contains reports whether the set holds a: as an element of an Addrs
// set, in a prefix of a CIDRs set.
func (s *Set) Contains(a netip.Addr) bool {
	if s.Kind != CIDRs {
		return s.Has(AddrElem(a))
	}
	for e := range s.n {
		if e.Prefix.Contains(a) {
			return true
		}
	}
	return false
}
