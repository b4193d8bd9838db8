package ipam

import (
	"net/netip"

	"github.com/cnibox/cnibox/store"
)

// Release frees every address of the attachment (container ID + ifname) in
// tx's network and returns what it freed. Nothing to free is no error.
func Release(tx *store.IPAMTx, containerID, ifname string) ([]store.Reservation, error) {
	return tx.ReleaseOwner(containerID, ifname)
}

// GC frees every reservation of tx's network whose attachment keep does not
// report as still valid, and returns what it freed.
func GC(tx *store.IPAMTx, keep func(containerID, ifname string) bool) ([]store.Reservation, error) {
	var freed []store.Reservation
	for _, r := range tx.All() {
		if keep != nil && keep(r.ContainerID, r.IfName) {
			continue
		}
		if err := tx.Release(r.Addr); err != nil {
			return nil, err
		}
		freed = append(freed, r)
	}
	return freed, nil
}

// Held returns what the attachment holds in each set, and the indexes of
// the sets where it holds nothing (for CHECK).
func Held(tx *store.IPAMTx, containerID, ifname string, sets []RangeSet) (held []Allocation, missing []int) {
	rs := tx.ByOwner(containerID, ifname)
	for i, set := range sets {
		found := false
		for _, r := range rs {
			if rg, ok := set.Range(r.Addr); ok {
				held = append(held, Allocation{Addr: netip.PrefixFrom(r.Addr, rg.Subnet.Bits()), Gateway: rg.Gateway, Set: i})
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, i)
		}
	}
	return held, missing
}
