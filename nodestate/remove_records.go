package nodestate

import (
	"errors"
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// removePortMapOrphans deletes the elements of the portmap orphans in one
// nftables transaction (guarded by their data: a host port another pod took
// over since stays). Elements without a record are first checked against
// the records once more: an owner that has one by now is an ADD that was in
// flight, and its elements stay.
func removePortMapOrphans(dataDir string, pm *cniplug.PortMaps, host *netops.Handle, orphans []Orphan) {
	var idx []int
	for i, o := range orphans {
		if o.Kind == KindPortMap || o.Kind == KindPortMapElem {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 || pm == nil {
		return
	}
	recorded := map[string]bool{}
	var recs []store.PortMapRecord
	st, err := store.OpenWith(store.Dir(dataDir), store.Options{NoCreate: true})
	if err == nil {
		err = st.ViewPortMaps(func(tx *store.PortMapTx) error {
			recs, err = tx.List("")
			return err
		})
		st.Close()
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		for _, i := range idx {
			orphans[i].Error = err.Error()
		}
		return
	}
	for _, r := range recs {
		recorded[pm.Owner(r.Network, r.ContainerID, r.IfName)] = true
	}
	var del []nft.PortMaps
	var doing []int
	for _, i := range idx {
		o := &orphans[i]
		if o.Kind == KindPortMapElem && len(o.portMaps) > 0 && recorded[o.portMaps[0].Owner] {
			o.Skipped = "its portmap record was written meanwhile (an ADD was in flight)"
			continue
		}
		del = append(del, o.portMaps...)
		doing = append(doing, i)
	}
	err = host.NFT().DeletePortMaps(del...)
	for _, i := range doing {
		orphans[i].Done = err == nil
		if err != nil {
			orphans[i].Error = err.Error()
		}
	}
}

// removeBandwidthIfbs deletes the ifb devices of stale bandwidth records
// and the ifbs no record names.
func removeBandwidthIfbs(host *netops.Handle, orphans []Orphan) {
	for i := range orphans {
		o := &orphans[i]
		if (o.Kind != KindBandwidth && o.Kind != KindIfb) || o.Ifb == "" {
			continue
		}
		err := host.DeleteLink(o.Ifb)
		if err != nil {
			o.Error = fmt.Sprintf("delete ifb %s: %v", o.Ifb, err)
		}
		if o.Kind == KindIfb {
			o.Done = err == nil
		}
	}
}

// removeRecordOrphans deletes the records of the orphans of rules 5 and 6
// whose kernel part (elements, ifb) is gone; a failure there keeps the
// record, so a rerun finds it again. Tuning restores nothing: the pod is
// gone.
func removeRecordOrphans(st *store.Store, storeErr error, orphans []Orphan) {
	for i := range orphans {
		o := &orphans[i]
		if !isRecordKind(o.Kind) || o.Error != "" || o.Skipped != "" {
			continue
		}
		if o.Kind == KindPortMapElem || o.Kind == KindIfb { // no record
			continue
		}
		if storeErr != nil {
			o.Done, o.Error = false, storeErr.Error()
			continue
		}
		var err error
		switch o.Kind {
		case KindPortMap:
			err = st.UpdatePortMaps(func(tx *store.PortMapTx) error {
				return tx.Delete(o.Network, o.ContainerID, o.IfName)
			})
		case KindTuning:
			err = st.Tuning().Delete(o.Network, o.ContainerID, o.IfName)
		case KindBandwidth:
			err = st.Bandwidth().Delete(o.Network, o.ContainerID, o.IfName)
		case KindDelegate:
			err = st.Delegates().Delete(o.Network, o.ContainerID, o.IfName)
		}
		o.Done = err == nil
		if err != nil {
			o.Error = err.Error()
		}
	}
}
