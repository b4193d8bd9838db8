package policymodel

import (
	"net/netip"
	"slices"
	"testing"
)

// TestNewSetSized: a sized set holds what a grown one holds, whatever
// the hint (under, exact, over the count, across the splits), and is
// copied on write as one: its clone keeps the elements a change of the
// set takes away, and the set splits where a grown one does.
func TestNewSetSized(t *testing.T) {
	for _, n := range []int{0, 1, 100, 512, 513, 2048, 2049, 5000} {
		for _, hint := range []int{0, n / 2, n, 2 * n, 600, 3000} {
			grown := &Set{ID: "s", Kind: Addrs, Key: "k"}
			sized := NewSetSized("s", Addrs, "k", hint)
			for i := range n {
				a := AddrElem(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
				if grown.Add(a) != sized.Add(a) {
					t.Fatalf("n %d hint %d: Add of %v new in one set, not in the other", n, hint, a)
				}
				sized.Add(a) // counted twice: one Del keeps it
			}
			if sized.Len() != n || !slices.Equal(sized.Elems(), grown.Elems()) {
				t.Fatalf("n %d hint %d: %d elements, want %d as the grown set's", n, hint, sized.Len(), n)
			}
			if n == 0 {
				continue
			}
			c := sized.Clone()
			first := AddrElem(netip.AddrFrom4([4]byte{10, 0, 0, 0}))
			if sized.Del(first) || !sized.Del(first) || sized.Has(first) {
				t.Fatalf("n %d hint %d: an element added twice is not gone after two Dels", n, hint)
			}
			if !c.Has(first) || c.Len() != n {
				t.Fatalf("n %d hint %d: the clone lost %v with the set's change", n, hint, first)
			}
			if hint <= n && len(sized.parts) != len(grown.parts) {
				t.Fatalf("n %d hint %d: %d parts, the grown set %d", n, hint, len(sized.parts), len(grown.parts))
			}
		}
	}
}
