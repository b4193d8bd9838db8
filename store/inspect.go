package store

import (
	"net/netip"

	bolt "go.etcd.io/bbolt"
)

// IPAMView is everything the store holds about one network's addresses, read
// in one transaction, for a person inspecting the node (`cnibox inspect
// ipam`, `cnibox gc`, `cnibox doctor`). It is a copy: changing it changes
// nothing in the store.
type IPAMView struct {
	Network string
	// Reservations, IPv4 first, in address order.
	Reservations []Reservation
	// Cursors are the round-robin positions, one per range set that handed
	// out an address, ordered by set ID. A set's ID lists its ranges
	// ("10.1.0.1-10.1.0.254,10.2.0.1-10.2.0.254", see ipam.RangeSet.ID).
	Cursors []IPAMCursor
	// Sticky maps "namespace/name" to the addresses the pod last held.
	Sticky map[string][]netip.Addr
	// Kept are the values roles keep beside the reservations
	// (IPAMTx.PutKept), by "bucket/key".
	Kept map[string][]byte
}

// IPAMCursor is the round-robin position of one range set.
type IPAMCursor struct {
	SetID string
	Last  netip.Addr // the address handed out last
}

// IPAMNetworks returns the names of the networks that have IPAM records, in
// name order.
func (s *Store) IPAMNetworks() ([]string, error) {
	var out []string
	err := s.view(func(tx *bolt.Tx) (err error) {
		out, err = ipamNetworks(tx)
		return err
	})
	return out, err
}

// ipamNetworks returns the names of the networks in the IPAM bucket (its
// nested buckets), in name order.
func ipamNetworks(tx *bolt.Tx) ([]string, error) {
	top := tx.Bucket(bucketIPAM)
	if top == nil {
		return nil, nil
	}
	var out []string
	err := top.ForEach(func(k, v []byte) error {
		if v == nil { // a nested bucket: a network
			out = append(out, string(k))
		}
		return nil
	})
	return out, err
}

// IPAMViews returns the IPAM records of one network ("" = every network, in
// name order), all read in one transaction. It reads whole networks: for
// inspection and garbage collection, never for ADD or DEL.
func (s *Store) IPAMViews(network string) ([]IPAMView, error) {
	var out []IPAMView
	err := s.view(func(btx *bolt.Tx) error {
		names := []string{network}
		if network == "" {
			var err error
			if names, err = ipamNetworks(btx); err != nil {
				return err
			}
		}
		for _, name := range names {
			t := newIPAMTx(btx, name)
			if t.nb == nil {
				continue
			}
			v := IPAMView{Network: name, Reservations: t.All(), Sticky: map[string][]netip.Addr{}}
			if b := t.read(bucketCursor); b != nil {
				if err := b.ForEach(func(k, val []byte) error {
					v.Cursors = append(v.Cursors, IPAMCursor{SetID: string(k), Last: keyAddr(val)})
					return nil
				}); err != nil {
					return err
				}
			}
			if b := t.read(bucketSticky); b != nil {
				if err := b.ForEach(func(k, _ []byte) error {
					v.Sticky[string(k)] = t.Sticky(string(k))
					return nil
				}); err != nil {
					return err
				}
			}
			v.Kept = t.kept()
			if t.err != nil {
				return t.err
			}
			out = append(out, v)
		}
		return nil
	})
	return out, err
}
