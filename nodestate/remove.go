package nodestate

import (
	"errors"
	"net/netip"

	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Remove removes each orphan and records what happened in it (Done, Error,
// Skipped), in the order the package documentation gives, so a failure part
// way leaves records that a rerun finds again. o says where the store is
// and which roles' names to use (those Find was given).
func Remove(host *netops.Handle, o Options, orphans []Orphan) {
	removeRoleKernel(host, o, orphans)
	var masq []netip.Addr
	for _, o := range orphans {
		if o.Kind == KindMasquerade {
			masq = append(masq, o.Addr)
		}
	}
	if len(masq) > 0 {
		err := host.NFT().DeleteMasq(masq)
		for i := range orphans {
			if orphans[i].Kind == KindMasquerade {
				orphans[i].set(err)
			}
		}
	}
	for i := range orphans {
		o := &orphans[i]
		if o.Kind != KindVeth {
			continue
		}
		err := host.NFT().DeleteMacSpoofCheck(o.Veth)
		if err == nil {
			err = host.DeleteLink(o.Veth)
		}
		o.set(err)
	}
	var storeErr error
	st, err := store.OpenWith(store.Dir(o.DataDir), store.Options{NoCreate: true})
	if errors.Is(err, store.ErrNotFound) {
		return // nothing recorded, so no store orphans
	}
	if err != nil {
		storeErr = err
	} else {
		defer st.Close()
	}
	// The roles' records before the endpoint records their staleness may
	// rest on.
	removeRoleRecords(st, storeErr, o.Roles, orphans)
	for i := range orphans {
		o := &orphans[i]
		switch {
		case o.Kind != KindReservation && o.Kind != KindEndpoint:
			continue
		case storeErr != nil:
			o.set(storeErr)
		case o.Kind == KindReservation:
			o.set(st.IPAM(o.Network, func(tx *store.IPAMTx) error {
				// Only if the address still has the owner Find decided on.
				if r, ok := tx.Get(o.Addr); ok && r.ContainerID == o.ContainerID && r.IfName == o.IfName {
					return tx.Release(o.Addr)
				}
				return nil
			}))
		default: // endpoint: anything its owner still holds goes with it
			err := st.IPAM(o.Network, func(tx *store.IPAMTx) error {
				_, err := ipam.Release(tx, o.ContainerID, o.IfName)
				return err
			})
			if err == nil {
				err = st.DeleteEndpoint(o.Network, o.ContainerID, o.IfName)
			}
			o.set(err)
		}
	}
}

// set records the outcome of removing o.
func (o *Orphan) set(err error) {
	o.Done = err == nil
	if err != nil {
		o.Error = err.Error()
	}
}
