package policymodel

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// containsLinear is Contains as it was until the sorted ranges: every
// prefix of a CIDRs set tried in turn. The property test holds the new
// one to it.
func containsLinear(s *Set, a netip.Addr) bool {
	if s.Kind != CIDRs {
		return s.Has(AddrElem(a))
	}
	for _, e := range s.Elems() {
		if e.Prefix.Contains(a) {
			return true
		}
	}
	return false
}

// randAddr is a random address of the family of bits (32 or 128), often
// near one of near (so that it falls in, beside and between prefixes).
func randAddr(rng *rand.Rand, bits int, near []netip.Prefix) netip.Addr {
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if len(near) > 0 && rng.IntN(3) > 0 {
		p := near[rng.IntN(len(near))]
		a := p.Addr().As16()
		if p.Addr().Is4() {
			a = netip.AddrFrom4(p.Addr().As4()).As16()
		}
		// Keep the prefix's bits, or all but the last few: in, at an
		// edge, or just outside.
		keep := p.Bits() + (128 - bits)
		if rng.IntN(2) == 0 {
			keep = max(0, keep-rng.IntN(3))
		}
		for i := range 16 {
			for j := range 8 {
				if i*8+j < keep {
					mask := byte(0x80 >> j)
					b[i] = b[i]&^mask | a[i]&mask
				}
			}
		}
		if rng.IntN(4) == 0 { // the last address of the prefix
			for i := keep; i < 128; i++ {
				b[i/8] |= 0x80 >> (i % 8)
			}
		}
	}
	if bits == 32 {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}

// randPrefixes is n random prefixes of the family of bits, of any
// length, some nested in others.
func randPrefixes(rng *rand.Rand, n, bits int) []netip.Prefix {
	var out []netip.Prefix
	for range n {
		a := randAddr(rng, bits, out)
		l := rng.IntN(bits + 1)
		if rng.IntN(2) == 0 {
			l = bits - rng.IntN(9) // mostly long: hosts and small blocks
		}
		p, _ := a.Prefix(l)
		out = append(out, p)
	}
	return out
}

// TestContainsAgrees: Contains on the sorted ranges answers as the
// linear scan of the prefixes did, on random CIDRs sets of either family
// and both, nested and adjacent prefixes, the edges of each prefix,
// IPv4-mapped IPv6 addresses (in no IPv4 prefix) and zoned ones (in
// none); an Addrs set still takes exact addresses only.
func TestContainsAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(60, 5))
	for round := range 400 {
		var ps []netip.Prefix
		switch round % 3 {
		case 0:
			ps = randPrefixes(rng, 1+rng.IntN(40), 32)
		case 1:
			ps = randPrefixes(rng, 1+rng.IntN(40), 128)
		default:
			ps = append(randPrefixes(rng, rng.IntN(20), 32), randPrefixes(rng, rng.IntN(20), 128)...)
		}
		s := &Set{ID: "s", Kind: CIDRs, Key: "cidrs"}
		for _, p := range ps {
			s.Add(Elem{Prefix: p})
		}
		for range 200 {
			bits := 32
			if rng.IntN(2) == 0 {
				bits = 128
			}
			a := randAddr(rng, bits, ps)
			switch rng.IntN(10) {
			case 0:
				a = netip.AddrFrom16(a.As16()) // IPv4-mapped
			case 1:
				if a.Is6() {
					a = a.WithZone("eth0")
				}
			}
			if got, want := s.Contains(a), containsLinear(s, a); got != want {
				t.Fatalf("round %d: Contains(%s) = %v, the linear scan says %v; set %v", round, a, got, want, ps)
			}
		}
	}
	addrs := NewSet("a", Addrs, "addrs", AddrElem(netip.MustParseAddr("10.0.0.1")))
	if !addrs.Contains(netip.MustParseAddr("10.0.0.1")) || addrs.Contains(netip.MustParseAddr("10.0.0.2")) {
		t.Error("an Addrs set does not take exactly its addresses")
	}
}

// cutHosts is prefix p minus the single addresses hosts (sorted): the
// prefixes an ipBlock of p with hosts as excepts leaves.
func cutHosts(p netip.Prefix, hosts []netip.Addr) []netip.Prefix {
	in := hosts[:0:0]
	for _, h := range hosts {
		if p.Contains(h) {
			in = append(in, h)
		}
	}
	switch {
	case len(in) == 0:
		return []netip.Prefix{p}
	case p.Bits() == p.Addr().BitLen():
		return nil
	}
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	a := p.Addr().As16()
	bit := p.Bits() + 128 - p.Addr().BitLen()
	a[bit/8] |= 0x80 >> (bit % 8)
	hiAddr := netip.AddrFrom16(a)
	if p.Addr().Is4() {
		hiAddr = netip.AddrFrom4([4]byte(a[12:]))
	}
	hi := netip.PrefixFrom(hiAddr, p.Bits()+1)
	return append(cutHosts(lo, in), cutHosts(hi, in)...)
}

// BenchmarkContains: Contains of an address in the CIDRs set of issue
// 60's finding 5 (::/0 minus 120 scattered /128s: 14,000 and some
// prefixes), of 16,384 scattered /32s (the per-policy cap of prefixes),
// and of a small set; half the addresses in a prefix, half not.
func BenchmarkContains(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 60))
	var hosts []netip.Addr
	for range 120 {
		hosts = append(hosts, randAddr(rng, 128, nil))
	}
	slices.SortFunc(hosts, netip.Addr.Compare)
	var v4 []netip.Prefix
	for range 16384 {
		v4 = append(v4, netip.PrefixFrom(randAddr(rng, 32, nil), 32))
	}
	cases := []struct {
		name string
		ps   []netip.Prefix
		bits int
	}{
		{"v6-all-minus-120-hosts", cutHosts(netip.MustParsePrefix("::/0"), hosts), 128},
		{"v4-16384-hosts", v4, 32},
		{"v4-4-blocks", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
			netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("192.0.2.0/24")}, 32},
	}
	for _, c := range cases {
		s := &Set{ID: "s", Kind: CIDRs, Key: "cidrs"}
		for _, p := range c.ps {
			s.Add(Elem{Prefix: p})
		}
		probes := make([]netip.Addr, 1024)
		for i := range probes {
			if i%2 == 0 {
				probes[i] = randAddr(rng, c.bits, nil)
			} else {
				probes[i] = randAddr(rng, c.bits, c.ps)
			}
		}
		s.Contains(probes[0]) // whatever Contains makes once
		b.Run(c.name, func(b *testing.B) {
			b.ReportMetric(float64(s.Len()), "prefixes")
			i := 0
			for b.Loop() {
				s.Contains(probes[i%len(probes)])
				i++
			}
		})
	}
}

// TestSetCopyOnWrite: a clone shares its set's elements until either
// changes, and neither's change shows in the other, small or large (a
// large set is split in parts, and a change copies one), also when the
// clone grows past the split.
func TestSetCopyOnWrite(t *testing.T) {
	addr := func(i int) Elem { return AddrElem(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})) }
	for _, n := range []int{3, splitAt - 2, 3 * splitAt, 20 * splitAt} {
		s := &Set{ID: "s", Kind: Addrs}
		for i := range n {
			s.Add(addr(i))
		}
		s.Add(addr(0)) // counted twice
		want := s.Elems()
		c := s.Clone()
		for i := n; i < n+splitAt; i++ { // the clone grows (and splits, if small)
			c.Add(addr(i))
		}
		c.Del(addr(1))
		c.Del(addr(0)) // one of two counts
		if got := s.Elems(); !slices.Equal(got, want) || s.Len() != n {
			t.Fatalf("%d: the clone's change shows in the set: %d elements, want %d", n, s.Len(), n)
		}
		if c.Len() != n+splitAt-1 || c.Has(addr(1)) || !c.Has(addr(0)) || !c.Has(addr(n+3)) {
			t.Fatalf("%d: the clone holds %d elements, want %d, without %v, with %v and %v", n, c.Len(), n+splitAt-1, addr(1), addr(0), addr(n+3))
		}
		cc := c.Clone()
		s.Del(addr(2))
		s.Add(addr(-1 & 0xffffff))
		if !c.Has(addr(2)) || c.Has(addr(-1&0xffffff)) || !cc.Has(addr(2)) {
			t.Fatalf("%d: the set's change after the clone shows in the clones", n)
		}
		if c.Del(addr(0)); !cc.Has(addr(0)) || c.Has(addr(0)) {
			t.Fatalf("%d: a clone of a clone shares its change", n)
		}
	}
}
