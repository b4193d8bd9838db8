package addrhold

import (
	"cmp"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
)

// Weight is the rendezvous weight of (a, b).
func Weight(a, b string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(a))
	h.Write([]byte{0})
	h.Write([]byte(b))
	return h.Sum64()
}

// Rank orders nodes for ip by rendezvous hashing, the highest weight
// first: the order in which they try to take the address when it is free,
// so that several addresses spread over the nodes and a node's leaving
// moves only its own.
func Rank(ip netip.Addr, nodes []string) {
	slices.SortFunc(nodes, func(a, b string) int {
		return cmp.Or(cmp.Compare(Weight(ip.String(), b), Weight(ip.String(), a)), strings.Compare(a, b))
	})
}
