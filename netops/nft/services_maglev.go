package nft

import (
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// Endpoint choice (services table): each endpoint set of a ServicePort is
// a fixed number of slots, each slot one endpoint, filled as Maglev does
// (Eisenbud et al., NSDI 2016): every endpoint has its own permutation of
// the slots, derived from its address and port alone, and the endpoints
// take turns claiming their next preferred free slot. Removing one of N
// endpoints then moves about 1/N of the slots (its own, and a few more),
// not all of them as `numgen mod N` over a list would, and every node
// computes the same slots for the same endpoints: a flow hashed to a slot
// (jhash of the client's address and port, services_render.go) reaches the
// same endpoint from whichever node it enters.
//
// The slot count is the first prime of slotPrimes at least slotFactor
// times the endpoints: each endpoint holds M/N slots rounded down or up,
// so its share differs from 1/N by at most N/M (1/slotFactor of it).

// slotFactor is the fewest slots per endpoint.
const slotFactor = 7

// slotPrimes are the slot counts (primes, each about twice the last).
var slotPrimes = []int{31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521}

// slotCount is the slot count for n endpoints.
func slotCount(n int) int {
	for _, p := range slotPrimes {
		if p >= slotFactor*n {
			return p
		}
	}
	return slotPrimes[len(slotPrimes)-1]
}

// maglev fills m slots (m prime) with indexes into eps: slot i holds
// eps[slots[i]]. eps must be non-empty.
func maglev(eps []svcmodel.Endpoint, m int) []int {
	n := len(eps)
	offset, skip, next := make([]int, n), make([]int, n), make([]int, n)
	for i, e := range eps {
		a, b := epHashes(e)
		offset[i] = int(a % uint64(m))
		skip[i] = int(b%uint64(m-1)) + 1
	}
	slots := make([]int, m)
	for i := range slots {
		slots[i] = -1
	}
	for filled := 0; ; {
		for i := range eps {
			c := (offset[i] + next[i]*skip[i]) % m
			for slots[c] >= 0 {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % m
			}
			slots[c] = i
			next[i]++
			if filled++; filled == m {
				return slots
			}
		}
	}
}

// epHashes are an endpoint's two hashes (offset and skip), of its address
// and port only.
func epHashes(e svcmodel.Endpoint) (uint64, uint64) {
	k := netip.AddrPortFrom(e.Addr.Unmap(), e.Port).String()
	h := fnv.New64a()
	h.Write([]byte(k))
	a := h.Sum64()
	h.Write([]byte{0x5a})
	return a, h.Sum64()
}

// sortedEps is eps sorted by address and port, each once: the order the
// endpoints take their turns in, the same on every node.
func sortedEps(eps []svcmodel.Endpoint) []svcmodel.Endpoint {
	out := slices.Clone(eps)
	slices.SortFunc(out, func(a, b svcmodel.Endpoint) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
	return slices.CompactFunc(out, func(a, b svcmodel.Endpoint) bool { return a.Addr == b.Addr && a.Port == b.Port })
}
