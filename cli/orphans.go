package cli

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/store"
)

// This file is the one place that decides what on the node is a leftover
// ("orphan"): `cnibox gc` removes what it finds, `cnibox doctor` reports it.
//
// The rules, from the evidence the node has:
//
//  1. An endpoint record is stale when its netns is gone (the path is no
//     longer a network namespace) or it was written before the last reboot
//     (its boot ID differs: no pod survives a reboot). Its host veth,
//     masquerade entries, reservations and the record itself go.
//  2. A reservation with no endpoint record of its owner (network, container,
//     ifname) is stale only with positive evidence that the owner is gone,
//     because host-local used by another main plugin (or an ADD still in
//     flight) reserves without an endpoint record:
//     a. it was made before the last reboot (its boot ID differs), or
//     b. the runtime's libcni cache records the attachment with a netns
//        that is gone.
//     Otherwise it is kept.
//  3. A host veth named like ours (cbx + 12 hex digits) is stale when no
//     live endpoint record names it and no kept reservation or live cached
//     attachment hashes to its name (an ADD in flight has reserved before it
//     creates the veth, and writes the record last).
//  4. A masquerade map entry is stale when no live endpoint record and no
//     kept reservation holds its pod address.
//
// Rules 5 (portmap, tuning, bandwidth and delegate records) and 6 (port
// mapping elements without a record) are in orphans_records.go.

// nodeView is what the rules look at, read once from the store, libcni's
// cache and the kernel.
type nodeView struct {
	BootID    string
	Endpoints []store.Endpoint
	IPAM      []store.IPAMView
	Cached    []*libcni.NetworkAttachment
	Links     []netops.Link
	Masq      []netops.MasqEntry
	// The chained and meta roles' records and the port mappings.
	recordView
	// Netns says, per netns path in the records and the cache, whether it
	// is a live network namespace. A path missing here counts as live.
	Netns map[string]bool
}

// orphan is one leftover, as gc prints and removes it.
type orphan struct {
	// Kind is "endpoint", "reservation", "veth", "masquerade", "portmap",
	// "portmap-elements", "tuning", "bandwidth", "ifb" or "delegate".
	Kind        string     `json:"kind"`
	Network     string     `json:"network,omitempty"`
	ContainerID string     `json:"containerID,omitempty"`
	IfName      string     `json:"ifName,omitempty"`
	Pod         string     `json:"pod,omitempty"`
	Netns       string     `json:"netns,omitempty"`
	Addr        netip.Addr `json:"addr,omitzero"`
	Veth        string     `json:"veth,omitempty"`
	// Plugin is the meta role of a delegate record.
	Plugin string `json:"plugin,omitempty"`
	// Ports are the mappings of a portmap record or of elements.
	Ports []string `json:"ports,omitempty"`
	// Owner is the owner comment of elements that name no attachment.
	Owner string `json:"owner,omitempty"`
	// Ifb is the ifb device of a bandwidth record, when it is still there.
	Ifb    string `json:"ifb,omitempty"`
	Reason string `json:"reason"`
	// Done and Error say what gc did (empty on a dry run).
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
	// Skipped says why gc left it after all.
	Skipped string `json:"skipped,omitempty"`

	// portMaps are the elements gc deletes for a portmap orphan.
	portMaps []netops.PortMaps
}

// subject names the orphan for a person.
func (o orphan) subject() string {
	if isRecordKind(o.Kind) {
		return o.recordSubject()
	}
	switch o.Kind {
	case "endpoint":
		s := o.Network + "/" + short(o.ContainerID) + "/" + o.IfName
		if o.Pod != "" {
			s += " (pod " + o.Pod + ")"
		}
		return s
	case "reservation":
		s := fmt.Sprintf("%s in %s (%s %s", o.Addr, o.Network, short(o.ContainerID), o.IfName)
		if o.Pod != "" {
			s += ", pod " + o.Pod
		}
		return s + ")"
	case "veth":
		return o.Veth
	case "masquerade":
		if o.Network != "" {
			return o.Addr.String() + " (" + o.Network + ")"
		}
		return o.Addr.String()
	}
	return o.Kind
}

type attachment struct{ network, cid, ifname string }

// kindOrder is the order orphans are listed in.
var kindOrder = map[string]int{"endpoint": 0, "reservation": 1, "veth": 2, "masquerade": 3,
	kindPortMap: 4, kindPortMapElem: 5, kindTuning: 6, kindBandwidth: 7, kindIfb: 8, kindDelegate: 9}

// findOrphans applies the rules above to v.
func findOrphans(v nodeView) []orphan {
	var out []orphan
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
		out = append(out, orphan{Kind: "endpoint", Network: ep.Network, ContainerID: ep.ContainerID, IfName: ep.IfName,
			Pod: podName(ep), Netns: ep.Netns, Veth: ep.HostVeth, Reason: reason})
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
			keptVeth[bridge.HostVethName(a.ContainerID, a.IfName)] = true
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
			}
			if reason == "" {
				keptIP[r.Addr] = true
				keptVeth[bridge.HostVethName(r.ContainerID, r.IfName)] = true
				continue
			}
			out = append(out, orphan{Kind: "reservation", Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName,
				Pod: r.Pod, Addr: r.Addr, Reason: reason})
		}
	}

	// 5, 6: records of the chained and meta roles, port mappings.
	out = append(out, recordOrphans(v, evidence{alive: alive, earlier: earlier, records: records, stale: stale, cached: cached})...)

	// 3. veths
	for _, l := range v.Links {
		if l.Kind != "veth" || !bridge.IsHostVeth(l.Name) || keptVeth[l.Name] {
			continue
		}
		reason, ok := staleVeth[l.Name]
		if !ok {
			reason = "named like a cnibox host veth, but no endpoint record, reservation or runtime cache entry is for it"
		}
		out = append(out, orphan{Kind: "veth", Veth: l.Name, Reason: reason})
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
		out = append(out, orphan{Kind: "masquerade", Network: m.Network, Addr: m.PodIP, Reason: reason})
	}
	sort.SliceStable(out, func(i, j int) bool { return kindOrder[out[i].Kind] < kindOrder[out[j].Kind] })
	return out
}
