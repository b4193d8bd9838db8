package bandwidth

import (
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
)

// The role's leftovers (cniplug.Leftovers): a stale record goes with its
// ifb device (rule 5 of nodestate's documentation), and an ifb named like
// the role's that no record names is stale (rule 7): the role writes its
// record before it creates the ifb, and deletes the ifb before the record.
const (
	kindRecord = "bandwidth" // also the records' bucket
	kindIfb    = "ifb"
)

var leftovers = cniplug.Leftovers{
	Rank:    30,
	Kinds:   []string{kindRecord, kindIfb},
	Records: []cniplug.RecordKind{{Kind: kindRecord, Bucket: kindRecord}},
	Find:    findLeftovers,
	Remove:  removeLeftovers,
}

// findLeftovers names the ifb of each stale record that is still there,
// and finds the ifbs no record names.
func findLeftovers(v *cniplug.LeftoverView) {
	there := map[string]bool{}
	for _, l := range v.Links {
		there[l.Name] = true
	}
	for _, o := range v.Stale {
		var r Record
		if o.Record == nil || o.Record.Decode(&r) != nil {
			continue
		}
		if r.Ifb != "" && there[r.Ifb] {
			o.Device = r.Ifb
			o.Notes = append(o.Notes, "ifb "+r.Ifb)
		}
	}
	named := map[string]bool{}
	for _, raw := range v.Records[kindRecord] {
		var r Record
		if raw.Decode(&r) == nil {
			named[r.Ifb] = true
		}
	}
	for _, l := range v.Links {
		if l.Kind == "ifb" && bwIsOurIfb(l.Name) && !named[l.Name] {
			v.Found = append(v.Found, cniplug.Leftover{Kind: kindIfb, Device: l.Name,
				Reason: "named like a cnibox bandwidth ifb, but no bandwidth record names it (the role records before it creates one)"})
		}
	}
}

// removeLeftovers deletes the ifb devices of the stale records and the
// ifbs no record names; a record whose ifb could not be deleted stays.
func removeLeftovers(r *cniplug.LeftoverRemoval) {
	for _, o := range r.Leftovers {
		if o.Device == "" {
			continue
		}
		err := r.Host.DeleteLink(o.Device)
		if err != nil {
			o.Error = fmt.Sprintf("delete ifb %s: %v", o.Device, err)
		}
		if o.Kind == kindIfb {
			o.Done = err == nil
		}
	}
}
