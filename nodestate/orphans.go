package nodestate

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// Kinds of orphans that are the node's own; the roles' kinds are those
// their declarations name (cniplug.Leftovers.Kinds).
const (
	KindEndpoint    = "endpoint"
	KindReservation = "reservation"
	KindVeth        = "veth"
	KindMasquerade  = "masquerade"
)

// Orphan is one leftover, as gc prints and removes it.
type Orphan struct{ cniplug.Leftover }

// Subject names the orphan for a person.
func (o Orphan) Subject() string {
	switch o.Kind {
	case KindEndpoint:
		s := o.Network + "/" + short(o.ContainerID) + "/" + o.IfName
		if o.Pod != "" {
			s += " (pod " + o.Pod + ")"
		}
		return s
	case KindReservation:
		s := fmt.Sprintf("%s in %s (%s %s", o.Addr, o.Network, short(o.ContainerID), o.IfName)
		if o.Pod != "" {
			s += ", pod " + o.Pod
		}
		return s + ")"
	case KindVeth:
		return o.Veth
	case KindMasquerade:
		if o.Network != "" {
			return o.Addr.String() + " (" + o.Network + ")"
		}
		return o.Addr.String()
	}
	return o.recordSubject()
}

type attachment struct{ network, cid, ifname string }

// nodeKinds are the node's own kinds in the order orphans are listed in;
// the roles' follow (cniplug.Registry.LeftoverKinds). (A list, not a map:
// a package-level map is built by code at every start of every role.)
var nodeKinds = []string{KindEndpoint, KindReservation, KindVeth, KindMasquerade}

// Find applies the rules above to v.
func Find(v View) []Orphan {
	var out []Orphan
	alive := func(path string) bool {
		ok, known := v.Netns[path]
		return !known || ok
	}
	earlier := func(boot string) bool { return boot != "" && v.BootID != "" && boot != v.BootID }

	// 1. endpoints
	records := map[attachment]bool{}
	stale := map[attachment]string{} // -> reason
	keptIP := map[netip.Addr]bool{}
	keptVeth := map[string]bool{}
	for _, ep := range v.Endpoints {
		k := attachment{ep.Network, ep.ContainerID, ep.IfName}
		records[k] = true
		reason := ""
		switch {
		case earlier(ep.BootID):
			reason = "recorded before the last reboot (boot " + ep.BootID + ")"
		case ep.Netns != "" && !alive(ep.Netns):
			reason = "its netns " + ep.Netns + " is gone"
		case ep.Extra["rebuilt"] == "": // store rebuild's records are of live pods
			reason = v.unfinishedADD(ep.ContainerID, ep.Created)
		}
		if reason == "" {
			for _, p := range ep.IPs {
				keptIP[p.Addr()] = true
			}
			if ep.HostVeth != "" {
				keptVeth[ep.HostVeth] = true
			}
			continue
		}
		stale[k] = reason
		out = append(out, Orphan{cniplug.Leftover{Kind: KindEndpoint, Network: ep.Network, ContainerID: ep.ContainerID, IfName: ep.IfName,
			Pod: podName(ep), Netns: ep.Netns, Veth: ep.HostVeth, Reason: reason}})
	}
	staleVeth := map[string]string{}
	staleIP := map[netip.Addr]string{}
	for _, ep := range v.Endpoints {
		r, ok := stale[attachment{ep.Network, ep.ContainerID, ep.IfName}]
		if !ok {
			continue
		}
		of := "of the stale endpoint " + ep.Network + "/" + short(ep.ContainerID) + "/" + ep.IfName + " (" + r + ")"
		if ep.HostVeth != "" && !keptVeth[ep.HostVeth] {
			staleVeth[ep.HostVeth] = "host veth " + of
		}
		for _, p := range ep.IPs {
			staleIP[p.Addr()] = "pod address " + of
		}
	}

	// 2. reservations
	cached := map[attachment]*libcni.NetworkAttachment{}
	for _, a := range v.Cached {
		cached[attachment{a.Network, a.ContainerID, a.IfName}] = a
		if a.NetNS == "" || alive(a.NetNS) {
			keepVeths(v.Roles, keptVeth, a.ContainerID, a.IfName)
		}
	}
	for _, view := range v.IPAM {
		for _, r := range view.Reservations {
			k := attachment{r.Network, r.ContainerID, r.IfName}
			reason := ""
			if records[k] {
				if er, ok := stale[k]; ok {
					reason = "held by the stale endpoint " + r.Network + "/" + short(r.ContainerID) + "/" + r.IfName + " (" + er + ")"
				}
			} else if earlier(r.BootID) {
				reason = "no endpoint record, and reserved before the last reboot (boot " + r.BootID + ")"
			} else if a, ok := cached[k]; ok && a.NetNS != "" && !alive(a.NetNS) {
				reason = "no endpoint record, and the runtime's cache says its netns was " + a.NetNS + ", which is gone"
			} else if u := v.unfinishedADD(r.ContainerID, r.Created); u != "" {
				reason = "no endpoint record, and " + u
			}
			if reason == "" {
				keptIP[r.Addr] = true
				keepVeths(v.Roles, keptVeth, r.ContainerID, r.IfName)
				continue
			}
			out = append(out, Orphan{cniplug.Leftover{Kind: KindReservation, Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName,
				Pod: r.Pod, Addr: r.Addr, Reason: reason}})
		}
	}

	// 5 to 7: the roles' records and what goes with them.
	out = append(out, recordOrphans(v, evidence{alive: alive, earlier: earlier, records: records, stale: stale, cached: cached})...)

	// 3. veths
	for _, l := range v.Links {
		if l.Kind != "veth" || v.Roles.HostVethOf(l.Name) == nil || keptVeth[l.Name] {
			continue
		}
		reason, ok := staleVeth[l.Name]
		if !ok {
			reason = "named like a cnibox host veth, but no endpoint record, reservation or runtime cache entry is for it"
		}
		out = append(out, Orphan{cniplug.Leftover{Kind: KindVeth, Veth: l.Name, Reason: reason}})
	}

	// 4. masquerade entries
	for _, m := range v.Masq {
		if keptIP[m.PodIP] {
			continue
		}
		reason, ok := staleIP[m.PodIP]
		if !ok {
			reason = "no live endpoint record or kept reservation holds " + m.PodIP.String()
		}
		out = append(out, Orphan{cniplug.Leftover{Kind: KindMasquerade, Network: m.Network, Addr: m.PodIP, Reason: reason}})
	}
	kindOrder := append(slices.Clip(nodeKinds), v.Roles.LeftoverKinds()...)
	sort.SliceStable(out, func(i, j int) bool {
		return slices.Index(kindOrder, out[i].Kind) < slices.Index(kindOrder, out[j].Kind)
	})
	return out
}

// keepVeths marks the host veths an attachment may have (one name per
// role's layout: the bridge role's cbx<hash>, azure-vnet's azv<hash>) as
// kept.
func keepVeths(roles *cniplug.Registry, kept map[string]bool, containerID, ifname string) {
	for _, name := range roles.HostVethNames(containerID, ifname) {
		kept[name] = true
	}
}

// short is a container ID as people read it: its first 12 characters.
func short(id string) string { return id[:min(len(id), 12)] }

// podName is "namespace/name", or "" when the runtime gave no pod.
func podName(ep store.Endpoint) string {
	if ep.PodName == "" {
		return ""
	}
	return ep.PodNamespace + "/" + ep.PodName
}
