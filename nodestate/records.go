package nodestate

import (
	"strconv"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// roleView is what rules 5 to 7 read besides the endpoints, reservations
// and cache of View: the records of the kinds the roles declare
// (cniplug.Leftovers) and what their Read hooks read of the kernel.
type roleView struct {
	// Records are the roles' records, by kind (cniplug.RecordKind.Kind).
	Records map[string][]store.RawRecord
	// Kernel is what each role's Read returned.
	Kernel map[*cniplug.Leftovers]any
}

// evidence is what rules 1 and 2 found, handed to rules 5 and 6.
type evidence struct {
	alive   func(path string) bool
	earlier func(boot string) bool
	records map[attachment]bool   // every endpoint record
	stale   map[attachment]string // the stale ones -> reason
	cached  map[attachment]*libcni.NetworkAttachment
}

// readRoleRecords reads the records of the roles' kinds from st.
func readRoleRecords(st *store.Store, roles *cniplug.Registry, v *roleView) error {
	v.Records = map[string][]store.RawRecord{}
	for _, l := range roles.Leftovers() {
		for _, k := range l.Records {
			recs, err := st.RawRecords(k.Bucket)
			if err != nil {
				return err
			}
			v.Records[k.Kind] = recs
		}
	}
	return nil
}

// readRoleKernel runs the roles' Read hooks on host.
func readRoleKernel(host *netops.Handle, roles *cniplug.Registry, v *roleView) error {
	v.Kernel = map[*cniplug.Leftovers]any{}
	for _, l := range roles.Leftovers() {
		if l.Read == nil {
			continue
		}
		got, err := l.Read(host)
		if err != nil {
			return err
		}
		v.Kernel[l] = got
	}
	return nil
}

// recordOrphans applies rules 5 to 7: it judges every record of the roles'
// kinds, and each role's Find says what goes with its stale records and
// what of its own no record names.
func recordOrphans(v View, ev evidence) []Orphan {
	// Per container: why it is gone, or that it is known to be live.
	goneCID := map[string]string{}
	liveCID := map[string]bool{}
	note := func(cid, netns, boot, what string) {
		switch {
		case ev.earlier(boot):
			if _, ok := goneCID[cid]; !ok {
				goneCID[cid] = what + " of the container is from before the last reboot"
			}
		case netns == "":
		case !ev.alive(netns):
			if _, ok := goneCID[cid]; !ok {
				goneCID[cid] = "the container's netns " + netns + " is gone (per its " + what + ")"
			}
		default:
			liveCID[cid] = true
		}
	}
	for _, ep := range v.Endpoints {
		note(ep.ContainerID, ep.Netns, ep.BootID, "endpoint record in "+ep.Network)
	}
	for _, a := range v.Cached {
		note(a.ContainerID, a.NetNS, "", "runtime cache entry in "+a.Network)
	}
	leftovers := v.Roles.Leftovers()
	for _, l := range leftovers {
		for _, k := range l.Records {
			if !k.Witness {
				continue
			}
			for _, r := range v.Records[k.Kind] {
				note(r.ContainerID, r.Netns, r.BootID, k.Kind+" record in "+r.Network)
			}
		}
	}

	// gone returns why the attachment is gone, "" without evidence (5a-e).
	gone := func(k attachment, netns, boot string) string {
		switch {
		case ev.earlier(boot):
			return "recorded before the last reboot (boot " + boot + ")"
		case netns != "" && !ev.alive(netns):
			return "its netns " + netns + " is gone"
		}
		if r, ok := ev.stale[k]; ok {
			return "its endpoint record is stale (" + r + ")"
		}
		if ev.records[k] {
			return ""
		}
		if a, ok := ev.cached[k]; ok && a.NetNS != "" && !ev.alive(a.NetNS) {
			return "no endpoint record, and the runtime's cache says its netns was " + a.NetNS + ", which is gone"
		}
		return goneCID[k.cid]
	}
	var known []store.Attachment
	for _, ep := range v.Endpoints {
		known = append(known, store.Attachment{Network: ep.Network, ContainerID: ep.ContainerID, IfName: ep.IfName})
	}
	for _, a := range v.Cached {
		known = append(known, store.Attachment{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName})
	}

	var out []Orphan
	for _, l := range leftovers {
		start := len(out)
		lv := &cniplug.LeftoverView{Records: map[string][]store.RawRecord{}, Kernel: v.Kernel[l], Links: v.Links, Known: known,
			Gone: func(at store.Attachment) string {
				return gone(attachment{at.Network, at.ContainerID, at.IfName}, "", "")
			},
			Lives: func(at store.Attachment) bool {
				return ev.records[attachment{at.Network, at.ContainerID, at.IfName}] || liveCID[at.ContainerID]
			}}
		for _, k := range l.Records {
			recs := v.Records[k.Kind]
			lv.Records[k.Kind] = recs
			for i := range recs {
				r := &recs[i]
				reason := gone(attachment{r.Network, r.ContainerID, r.IfName}, r.Netns, r.BootID)
				if reason == "" {
					continue
				}
				out = append(out, Orphan{cniplug.Leftover{Kind: k.Kind, Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName,
					Pod: r.Pod, Netns: r.Netns, Plugin: r.Plugin, Reason: reason, Record: r}})
			}
		}
		if l.Find == nil {
			continue
		}
		for i := start; i < len(out); i++ {
			lv.Stale = append(lv.Stale, &out[i].Leftover)
		}
		l.Find(lv)
		for _, f := range lv.Found {
			out = append(out, Orphan{f})
		}
	}
	return out
}

// recordSubject is Orphan.Subject for the roles' kinds: the attachment (or
// the owner its kernel objects name, or the device that is the leftover)
// and what goes with it.
func (o Orphan) recordSubject() string {
	if o.ContainerID == "" && o.Owner == "" {
		return o.Device
	}
	s := o.Network + "/" + short(o.ContainerID) + "/" + o.IfName
	if o.ContainerID == "" {
		s = "owner " + strconv.Quote(o.Owner)
	}
	var extra []string
	if o.Pod != "" {
		extra = append(extra, "pod "+o.Pod)
	}
	if o.Plugin != "" {
		extra = append(extra, o.Plugin)
	}
	if len(o.Ports) > 0 {
		extra = append(extra, strings.Join(o.Ports, ", "))
	}
	extra = append(extra, o.Notes...)
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, "; ") + ")"
	}
	return s
}
