package ipam

import (
	"math"
	"net/netip"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/addrmath"
	"github.com/cnibox/cnibox/store"
)

// SetUsage is how full one range set is.
type SetUsage struct {
	Set      int
	Ranges   string // the set's ranges, e.g. "10.1.0.1-10.1.0.254"
	Used     uint64 // reserved addresses in the set's ranges
	Capacity uint64 // addresses that can be handed out (gateways excluded); saturates at MaxUint64
	Full     bool   // no address can be handed out
}

// Usage reports how full each set is. Its cost grows with the number of
// separate runs of reserved addresses, not with the number of addresses: for
// STATUS and inspection, not for every ADD.
func Usage(tx *store.IPAMTx, sets []RangeSet) []SetUsage {
	excluded := gateways(sets)
	out := make([]SetUsage, len(sets))
	for i, set := range sets {
		out[i] = usage(tx, set, excluded)
		out[i].Set = i
	}
	return out
}

func usage(tx *store.IPAMTx, set RangeSet, excluded map[netip.Addr]bool) SetUsage {
	u := SetUsage{Ranges: set.String()}
	for _, r := range set {
		u.Used = addrmath.SatAdd(u.Used, uint64(tx.CountIn(r.Start, r.End)))
		size := r.size()
		for g := range excluded {
			if r.Contains(g) {
				if _, reserved := tx.Get(g); !reserved && size > 0 && size != math.MaxUint64 {
					size--
				}
			}
		}
		u.Capacity = addrmath.SatAdd(u.Capacity, size)
	}
	a := allocator{tx: tx, excluded: excluded}
	u.Full = true
	for _, r := range set {
		if _, ok := a.firstFree(r.Start, r.End); ok {
			u.Full = false
			break
		}
	}
	return u
}

// Ready returns a "not ready" error (cniplug.CodeNotReady) naming the
// network and the full sets when any set has no free address, since then
// every ADD fails; nil otherwise.
func Ready(tx *store.IPAMTx, network string, sets []RangeSet) error {
	var full []string
	for _, u := range Usage(tx, sets) {
		if u.Full {
			full = append(full, u.Ranges)
		}
	}
	if len(full) == 0 {
		return nil
	}
	return cniplug.Errorf(cniplug.CodeNotReady, "network %q: no free address in %s; release addresses (cnibox gc) or widen the ranges", network, strings.Join(full, "; "))
}
