package nodestate

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// recordView is what rules 5 and 6 read besides the endpoints, reservations
// and cache of View.
type recordView struct {
	PortMaps  []store.PortMapRecord
	Tuning    []store.TuningRecord
	Bandwidth []store.BandwidthRecord
	Delegates []store.DelegateRecord
	// PortMapElems is table inet cnibox-portmap, grouped by owner.
	PortMapElems []nft.PortMaps
}

// evidence is what rules 1 and 2 found, handed to rules 5 and 6.
type evidence struct {
	alive   func(path string) bool
	earlier func(boot string) bool
	records map[attachment]bool   // every endpoint record
	stale   map[attachment]string // the stale ones -> reason
	cached  map[attachment]*libcni.NetworkAttachment
}

// readRecordView reads the records from st.
func readRecordView(st *store.Store, v *recordView) error {
	err := st.ViewPortMaps(func(tx *store.PortMapTx) error {
		var err error
		v.PortMaps, err = tx.List("")
		return err
	})
	if err != nil {
		return err
	}
	if v.Tuning, err = st.Tuning().List(""); err != nil {
		return err
	}
	if v.Bandwidth, err = st.Bandwidth().List(""); err != nil {
		return err
	}
	v.Delegates, err = st.Delegates().List("")
	return err
}

// recordOrphans applies rules 5 to 7.
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
	for _, r := range v.Tuning {
		note(r.ContainerID, r.Netns, r.BootID, "tuning record in "+r.Network)
	}
	for _, r := range v.Delegates {
		note(r.ContainerID, r.Netns, r.BootID, "delegate record in "+r.Network)
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
	rec := func(kind string, k attachment, pod, netns, reason string) Orphan {
		return Orphan{Kind: kind, Network: k.network, ContainerID: k.cid, IfName: k.ifname, Pod: pod, Netns: netns, Reason: reason}
	}

	var out []Orphan
	// 5. portmap records, with their elements (the names are the port
	// mapping role's: without one, its records and elements are not read).
	pm := v.Roles.PortMapper()
	if pm == nil {
		pm = &cniplug.PortMaps{Owner: func(string, string, string) string { return "" }}
		v.PortMaps, v.PortMapElems = nil, nil
	}
	recorded := map[string]bool{}  // owners with a record
	staleOwner := map[string]int{} // owner -> index in out
	for _, r := range v.PortMaps {
		k := attachment{r.Network, r.ContainerID, r.IfName}
		owner := pm.Owner(r.Network, r.ContainerID, r.IfName)
		recorded[owner] = true
		reason := gone(k, "", r.BootID)
		if reason == "" {
			continue
		}
		o := rec(KindPortMap, k, r.Pod, "", reason)
		elems := pm.OfRecord(r)
		o.Ports = describePorts(elems)
		o.portMaps = []nft.PortMaps{elems}
		staleOwner[owner] = len(out)
		out = append(out, o)
	}
	// 6. elements without a record (and the dumped elements of stale records).
	known := map[string]attachment{} // owner -> attachment, for hashed owners
	for _, ep := range v.Endpoints {
		known[pm.Owner(ep.Network, ep.ContainerID, ep.IfName)] = attachment{ep.Network, ep.ContainerID, ep.IfName}
	}
	for _, a := range v.Cached {
		known[pm.Owner(a.Network, a.ContainerID, a.IfName)] = attachment{a.Network, a.ContainerID, a.IfName}
	}
	for _, g := range v.PortMapElems {
		if i, ok := staleOwner[g.Owner]; ok {
			// The kernel's data first: of two with the same key, the
			// first is deleted (a record can be older than the table).
			out[i].portMaps = append([]nft.PortMaps{g}, out[i].portMaps...)
			continue
		}
		if recorded[g.Owner] {
			continue
		}
		k, ok := known[g.Owner]
		if !ok {
			n, cid, ifn, parsed := pm.ParseOwner(g.Owner)
			ok = parsed
			k = attachment{n, cid, ifn}
		}
		reason := ""
		switch {
		case !ok:
			reason = "no portmap record, endpoint record or runtime cache entry is for its owner " + fmt.Sprintf("%q", g.Owner)
		case gone(k, "", "") != "":
			reason = "no portmap record, and " + gone(k, "", "")
		case ev.records[k] || liveCID[k.cid]:
			continue // the attachment lives; its record is lost or not written yet
		default:
			reason = "no portmap record, endpoint record or runtime cache entry is for " + k.network + "/" + short(k.cid) + "/" + k.ifname
		}
		o := Orphan{Kind: KindPortMapElem, Reason: reason, Ports: describePorts(g), Owner: g.Owner, portMaps: []nft.PortMaps{g}}
		if ok {
			o.Network, o.ContainerID, o.IfName = k.network, k.cid, k.ifname
		}
		out = append(out, o)
	}

	// 5. tuning, bandwidth and delegate records.
	for _, r := range v.Tuning {
		k := attachment{r.Network, r.ContainerID, r.IfName}
		if reason := gone(k, r.Netns, r.BootID); reason != "" {
			out = append(out, rec(KindTuning, k, "", r.Netns, reason))
		}
	}
	for _, r := range v.Bandwidth {
		k := attachment{r.Network, r.ContainerID, r.IfName}
		if reason := gone(k, "", r.BootID); reason != "" {
			o := rec(KindBandwidth, k, "", "", reason)
			if r.Ifb != "" && hasLinkNamed(v.Links, r.Ifb) {
				o.Ifb = r.Ifb
			}
			out = append(out, o)
		}
	}
	// 7. ifbs no bandwidth record names.
	named := map[string]bool{}
	for _, r := range v.Bandwidth {
		named[r.Ifb] = true
	}
	for _, l := range v.Links {
		if l.Kind == "ifb" && v.Roles.IsIfb(l.Name) && !named[l.Name] {
			out = append(out, Orphan{Kind: KindIfb, Ifb: l.Name,
				Reason: "named like a cnibox bandwidth ifb, but no bandwidth record names it (the role records before it creates one)"})
		}
	}
	for _, r := range v.Delegates {
		k := attachment{r.Network, r.ContainerID, r.IfName}
		if reason := gone(k, r.Netns, r.BootID); reason != "" {
			o := rec(KindDelegate, k, r.Pod, r.Netns, reason)
			o.Plugin = r.Plugin
			out = append(out, o)
		}
	}
	return out
}

func hasLinkNamed(links []netops.Link, name string) bool {
	for _, l := range links {
		if l.Name == name {
			return true
		}
	}
	return false
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

// recordSubject is Orphan.Subject for the kinds of these rules.
func (o Orphan) recordSubject() string {
	if o.Kind == KindIfb {
		return o.Ifb
	}
	s := o.Network + "/" + short(o.ContainerID) + "/" + o.IfName
	if o.ContainerID == "" {
		s = "owner " + fmt.Sprintf("%q", o.Owner)
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
	if o.Ifb != "" {
		extra = append(extra, "ifb "+o.Ifb)
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, "; ") + ")"
	}
	return s
}

// isRecordKind reports whether kind is one of rules 5 and 6.
func isRecordKind(kind string) bool {
	switch kind {
	case KindPortMap, KindPortMapElem, KindTuning, KindBandwidth, KindIfb, KindDelegate:
		return true
	}
	return false
}
