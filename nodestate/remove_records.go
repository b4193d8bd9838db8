package nodestate

import (
	"slices"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// removeRoleKernel runs each role's Remove hook on its leftovers: the
// kernel part of them (elements, devices) goes before their records.
func removeRoleKernel(host *netops.Handle, o Options, orphans []Orphan) {
	for _, l := range o.Roles.Leftovers() {
		if l.Remove == nil {
			continue
		}
		r := &cniplug.LeftoverRemoval{Host: host, DataDir: o.DataDir}
		for i := range orphans {
			if slices.Contains(l.Kinds, orphans[i].Kind) {
				r.Leftovers = append(r.Leftovers, &orphans[i].Leftover)
			}
		}
		if len(r.Leftovers) > 0 {
			l.Remove(r)
		}
	}
}

// removeRoleRecords deletes the records of the roles' stale records whose
// kernel part is gone; a failure there keeps the record, so a rerun finds
// it again.
func removeRoleRecords(st *store.Store, storeErr error, roles *cniplug.Registry, orphans []Orphan) {
	bucket := map[string]string{} // kind -> bucket
	for _, l := range roles.Leftovers() {
		for _, k := range l.Records {
			bucket[k.Kind] = k.Bucket
		}
	}
	for i := range orphans {
		o := &orphans[i]
		b, ok := bucket[o.Kind]
		if !ok || o.Record == nil || o.Error != "" || o.Skipped != "" {
			continue
		}
		if storeErr != nil {
			o.Done, o.Error = false, storeErr.Error()
			continue
		}
		o.set(st.DeleteRawRecord(b, o.Network, o.ContainerID, o.IfName))
	}
}
