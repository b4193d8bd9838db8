package portmap

import (
	"errors"
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// The role's leftovers (cniplug.Leftovers), rules 5 and 6 of nodestate's
// documentation: a stale record goes with its elements in table inet
// cnibox-portmap; elements whose owner has no record go when the node says
// their attachment is gone, or when nothing on it accounts for the owner.
const (
	kindRecord   = "portmap"
	kindElements = "portmap-elements"
)

var leftovers = cniplug.Leftovers{
	Rank:    10,
	Kinds:   []string{kindRecord, kindElements},
	Records: []cniplug.RecordKind{{Kind: kindRecord, Bucket: bucket}},
	Read:    readElements,
	Find:    findLeftovers,
	Remove:  removeLeftovers,
}

// readElements dumps table inet cnibox-portmap, grouped by owner.
func readElements(host *netops.Handle) (any, error) { return host.NFT().PortMapEntries() }

// findLeftovers adds to each stale record its elements (the kernel's
// first: of two with the same key, the first is deleted, and a record can
// be older than the table) and finds the elements no record accounts for.
func findLeftovers(v *cniplug.LeftoverView) {
	elems, _ := v.Kernel.([]nft.PortMaps)
	recorded := map[string]bool{} // owners with a record
	for _, r := range v.Records[kindRecord] {
		recorded[pmOwner(r.Network, r.ContainerID, r.IfName)] = true
	}
	staleOwner := map[string]*cniplug.Leftover{}
	for _, o := range v.Stale {
		var r Record
		if o.Record == nil || o.Record.Decode(&r) != nil {
			continue
		}
		pm := portMapsOf(r)
		o.Ports = describePorts(pm)
		o.Kernel = []nft.PortMaps{pm}
		staleOwner[pm.Owner] = o
	}
	known := map[string]store.Attachment{} // owner -> attachment, for hashed owners
	for _, at := range v.Known {
		known[pmOwner(at.Network, at.ContainerID, at.IfName)] = at
	}
	for _, g := range elems {
		if o, ok := staleOwner[g.Owner]; ok {
			o.Kernel = append([]nft.PortMaps{g}, o.Kernel.([]nft.PortMaps)...)
			continue
		}
		if recorded[g.Owner] {
			continue
		}
		at, ok := known[g.Owner]
		if !ok {
			n, cid, ifn, parsed := parseOwner(g.Owner)
			ok, at = parsed, store.Attachment{Network: n, ContainerID: cid, IfName: ifn}
		}
		reason := ""
		switch {
		case !ok:
			reason = "no portmap record, endpoint record or runtime cache entry is for its owner " + fmt.Sprintf("%q", g.Owner)
		case v.Gone(at) != "":
			reason = "no portmap record, and " + v.Gone(at)
		case v.Lives(at):
			continue // the attachment lives; its record is lost or not written yet
		default:
			reason = "no portmap record, endpoint record or runtime cache entry is for " + at.Network + "/" + short(at.ContainerID) + "/" + at.IfName
		}
		o := cniplug.Leftover{Kind: kindElements, Reason: reason, Ports: describePorts(g), Owner: g.Owner, Kernel: []nft.PortMaps{g}}
		if ok {
			o.Network, o.ContainerID, o.IfName = at.Network, at.ContainerID, at.IfName
		}
		v.Found = append(v.Found, o)
	}
}

// removeLeftovers deletes the elements of the leftovers in one nftables
// transaction (guarded by their data: a host port another pod took over
// since stays). Elements without a record are first checked against the
// records once more: an owner that has one by now is an ADD that was in
// flight, and its elements stay.
func removeLeftovers(r *cniplug.LeftoverRemoval) {
	if len(r.Leftovers) == 0 {
		return
	}
	recorded := map[string]bool{}
	var recs []Record
	st, err := store.OpenWith(store.Dir(r.DataDir), store.Options{NoCreate: true})
	if err == nil {
		err = Records.View(st, func(tx store.KindTx[Record]) error {
			recs, err = tx.List("")
			return err
		})
		st.Close()
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		for _, o := range r.Leftovers {
			o.Error = err.Error()
		}
		return
	}
	for _, rec := range recs {
		recorded[pmOwner(rec.Network, rec.ContainerID, rec.IfName)] = true
	}
	var del []nft.PortMaps
	var doing []*cniplug.Leftover
	for _, o := range r.Leftovers {
		pms, _ := o.Kernel.([]nft.PortMaps)
		if o.Kind == kindElements && len(pms) > 0 && recorded[pms[0].Owner] {
			o.Skipped = "its portmap record was written meanwhile (an ADD was in flight)"
			continue
		}
		del = append(del, pms...)
		doing = append(doing, o)
	}
	err = r.Host.NFT().DeletePortMaps(del...)
	for _, o := range doing {
		o.Done = err == nil
		if err != nil {
			o.Error = err.Error()
		}
	}
}

// describePorts lists the mappings of pm for a person
// ("*:8080/tcp -> 10.88.0.2:80"); masquerade entries are not listed.
func describePorts(pm nft.PortMaps) []string {
	var out []string
	for _, m := range pm.Mappings {
		out = append(out, m.String())
	}
	return out
}

// short is a container ID as people read it: its first 12 characters.
func short(id string) string { return id[:min(len(id), 12)] }

// doctorRecorded runs the role's check (doctor) on the elements the role
// recorded for the endpoint.
func doctorRecorded(c *cniplug.EndpointCheck) {
	if c.Store == nil {
		return
	}
	ep := c.Endpoint
	r, found, err := Records.In(c.Store).Get(ep.Network, ep.ContainerID, ep.IfName)
	if err != nil || !found {
		return
	}
	if want := portMapsOf(r); !want.Empty() {
		doctor(c, want)
	}
}
