package nodestate

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Recovered is one attachment that Discover found on the node: the
// endpoint record Record writes for it (Plugin: the role that made it,
// "bridge" or "ptp" for a host veth, the cached config's type for a device
// in a pod; Gateways and Routes where the role's layout tells them; Extra
// the facts of a device the cached config names), and how it was found.
type Recovered struct {
	store.Endpoint
	// Pod is "namespace/name" from the runtime's cache entry.
	Pod string `json:"pod,omitempty"`
	// Source says where the owner came from: "cache" (libcni's cache) or
	// "config" (the network config of the bridge; container ID unknown).
	Source string `json:"source"`
	// Reserve says that Record reserves IPs in the store: a host veth's
	// addresses, or those of a network whose IPAM keeps its reservations
	// there (cniplug.Known.StoreIPAM: host-local).
	Reserve bool `json:"-"`
}

// netConf is what rebuild needs of a network config: which bridge and IPAM
// it uses.
type netConf struct {
	name, bridge, ipam string
	sticky             bool
}

// bridgeNetworks reads the network configs of confDir: the key a role's
// host veth layout files a config under (HostVeth.NetworkKey: a bridge's
// name, or the key of the role's veths on no bridge, "" for ptp) -> the
// networks of that key, and network name -> config.
func bridgeNetworks(roles *cniplug.Registry, confDir string) (map[string][]netConf, map[string]netConf) {
	veths := roles.HostVeths()
	byBridge, byName := map[string][]netConf{}, map[string]netConf{}
	files, _ := libcni.ConfFiles(confDir, ConfExtensions)
	for _, f := range files {
		l, err := LoadConfFile(f)
		if err != nil {
			continue
		}
		for _, p := range l.Plugins {
			var pc struct {
				Type   string `json:"type"`
				Bridge string `json:"bridge"`
				IPAM   struct {
					Type   string `json:"type"`
					Sticky bool   `json:"sticky"`
				} `json:"ipam"`
			}
			if json.Unmarshal(p.Bytes, &pc) != nil {
				continue
			}
			nc := netConf{name: l.Name, bridge: pc.Bridge, ipam: pc.IPAM.Type, sticky: pc.IPAM.Sticky}
			if pc.IPAM.Type != "" {
				byName[l.Name] = nc
			}
			for _, v := range veths {
				if key, ok := v.NetworkKey(pc.Type, p.Bytes); ok {
					byBridge[key] = append(byBridge[key], nc)
					byName[l.Name] = nc
					break
				}
			}
		}
	}
	return byBridge, byName
}

// podLink is a veth end in a pod namespace.
type podLink struct {
	netns string
	link  netops.Link
	addrs []netip.Prefix
}

// namespaces returns the network namespaces of the node other than the
// caller's own: /run/netns/* first (their paths are what runtimes record),
// then /proc/*/ns/net, each namespace once.
func namespaces() []string {
	seen := map[[2]uint64]bool{}
	key := func(p string) ([2]uint64, bool) {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil || !store.IsNetns(p) {
			return [2]uint64{}, false
		}
		return [2]uint64{st.Dev, st.Ino}, true
	}
	if k, ok := key("/proc/self/ns/net"); ok {
		seen[k] = true
	}
	var out []string
	named, _ := filepath.Glob("/run/netns/*")
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range append(named, procs...) {
		if k, ok := key(p); ok && !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}

// Discover finds the attachments on the node: the host veths of the roles'
// layouts (cniplug.HostVeth: the bridge role's and ptp's cbx<hash>, a ptp
// veth on no bridge holding the pod's gateways with the node's /32 and /128
// routes to the pod; azure-vnet's azv<hash>, on its bridge or, in
// transparent mode, on none with the node's routes) matched with their
// peers in the pod namespaces, owners from libcni's cache or the configs;
// and cached attachments of other main plugins whose interface is still in
// their namespace (devices in a pod carry no owner of their own: see
// docs/cli.md).
func Discover(roles *cniplug.Registry, confDir, cacheDir string) ([]Recovered, []string, error) {
	var warnings []string
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
	byBridge, byName := bridgeNetworks(roles, confDir)
	cached, err := libcni.NewCNIConfigWithCacheDir(nil, cacheDir, nil).GetCachedAttachments("")
	if err != nil {
		warn("libcni's cache in %s cannot be read (%v): container IDs come from nowhere else", cacheDir, err)
	}
	cacheByVeth := map[string]*libcni.NetworkAttachment{}
	for _, a := range cached {
		for _, name := range roles.HostVethNames(a.ContainerID, a.IfName) {
			cacheByVeth[name] = a
		}
	}

	host, err := netops.Open("")
	if err != nil {
		return nil, nil, err
	}
	defer host.Close()
	links, err := host.Links()
	if err != nil {
		return nil, nil, err
	}
	byIndex := map[int]netops.Link{}
	for _, l := range links {
		byIndex[l.Index] = l
	}
	// Every veth of the namespaces that hold peers of the node's veths, by
	// (the namespace's id in the node's namespace, its index): ifindexes
	// alone repeat from namespace to namespace.
	peers := map[[2]int]podLink{}
	for _, ns := range namespaces() {
		id, err := host.NetnsID(ns)
		if err != nil || id < 0 {
			continue // no veth of the node has its peer there
		}
		h, err := netops.Open(ns)
		if err != nil {
			continue
		}
		ls, err := h.Links()
		for _, l := range ls {
			if err != nil || l.Kind != "veth" {
				continue
			}
			addrs, _ := h.Addrs(l.Name)
			if _, dup := peers[[2]int{id, l.Index}]; !dup {
				peers[[2]int{id, l.Index}] = podLink{netns: ns, link: l, addrs: addrs}
			}
		}
		h.Close()
	}

	var out []Recovered
	done := map[string]bool{} // network/cid/ifname
	for _, hv := range links {
		layout := roles.HostVethOf(hv.Name)
		if hv.Kind != "veth" || layout == nil {
			continue
		}
		routedKey := cmp.Or(layout.RoutedKey, layout.Routed)
		br, ok := byIndex[hv.MasterIndex]
		if !ok && hv.MasterIndex != 0 {
			warn("veth %s is on master %d, which is not a link of the node: skipped", hv.Name, hv.MasterIndex)
			continue
		}
		where := "bridge " + br.Name
		if hv.MasterIndex == 0 {
			where = "no bridge (" + routedKey + ")"
		}
		nsid, err := host.PeerNetnsID(hv.Name)
		p, ok := peers[[2]int{nsid, hv.PeerIndex}]
		if err != nil || !ok || p.link.PeerIndex != hv.Index {
			warn("veth %s on %s: its peer is in no namespace this process can see: skipped", hv.Name, where)
			continue
		}
		r := Recovered{Endpoint: store.Endpoint{Plugin: layout.Plugin, Bridge: br.Name, HostVeth: hv.Name, Netns: p.netns, IfName: p.link.Name,
			MAC: p.link.MAC.String(), IPs: p.addrs}, Reserve: true}
		if hv.MasterIndex == 0 && !routedVeth(host, layout, hv.Name, &r, warn) {
			continue
		}
		if a, ok := cacheByVeth[hv.Name]; ok && a.IfName == p.link.Name {
			r.Network, r.ContainerID, r.Pod, r.Source = a.Network, a.ContainerID, cachedPod(a), "cache"
			if a.NetNS != "" && a.NetNS != p.netns && store.IsNetns(a.NetNS) {
				r.Netns = a.NetNS
			}
		} else {
			key := br.Name
			if hv.MasterIndex == 0 {
				key = layout.RoutedKey
			}
			nets := byBridge[key]
			if len(nets) != 1 {
				warn("veth %s on %s: no libcni cache entry, and %d network configs in %s use that: its addresses %v are not reserved", hv.Name, where, len(nets), confDir, p.addrs)
				continue
			}
			r.Network, r.ContainerID, r.Source = nets[0].name, "rebuilt-"+hv.Name, "config"
			warn("veth %s (%s, %v): no libcni cache entry: recorded as container %s", hv.Name, nets[0].name, p.addrs, r.ContainerID)
		}
		done[r.Network+"/"+r.ContainerID+"/"+r.IfName] = true
		out = append(out, r)
	}
	// Cached attachments of other main plugins: the device roles' (with an
	// endpoint record) and any other's with host-local as IPAM (only the
	// reservations).
	for _, a := range cached {
		if r, ok := cachedDevice(roles, a, byName); ok && !done[a.Network+"/"+a.ContainerID+"/"+a.IfName] {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Network != out[j].Network {
			return out[i].Network < out[j].Network
		}
		return out[i].ContainerID < out[j].ContainerID
	})
	return out, warnings, nil
}

// cachedPod returns "namespace/name" from a cached attachment's CNI_ARGS.
func cachedPod(a *libcni.NetworkAttachment) string {
	var ns, name string
	for _, kv := range a.CniArgs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			ns = kv[1]
		case "K8S_POD_NAME":
			name = kv[1]
		}
	}
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

// Record writes the attachments Discover found into a new store (see
// store.Rebuild): one reservation per pod address of those Discover marks
// (Reserve: of a host veth, or of a network with host-local IPAM), an
// endpoint record for each attachment
// whose role is known (bridge, ptp, the device roles), sticky records for
// pods of sticky networks.
func Record(st *store.Store, found []Recovered, confDir string, warn io.Writer) error {
	_, byName := bridgeNetworks(nil, confDir) // sticky networks: no role's layout needed
	now := time.Now().UTC()
	for _, r := range found {
		var reserve []netip.Prefix
		if r.Reserve {
			reserve = r.IPs // else another IPAM's addresses: not the store's to hold
		}
		err := st.IPAM(r.Network, func(tx *store.IPAMTx) error {
			var addrs []netip.Addr
			for _, p := range reserve {
				err := tx.Reserve(store.Reservation{Addr: p.Addr(), ContainerID: r.ContainerID, IfName: r.IfName, Pod: r.Pod, Subnet: p.Masked(), Created: now})
				if errors.Is(err, store.ErrTaken) {
					fmt.Fprintf(warn, "warning: %v: %s/%s does not get it (two pods with one address on the node?)\n", err, r.ContainerID, r.IfName)
					continue
				}
				if err != nil {
					return err
				}
				addrs = append(addrs, p.Addr())
			}
			if byName[r.Network].sticky && r.Pod != "" && len(addrs) > 0 {
				return tx.SetSticky(r.Pod, addrs)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if r.Plugin == "" {
			continue
		}
		ep := r.Endpoint
		ep.Created = now
		ep.Extra = map[string]string{"rebuilt": "cnibox store rebuild, from " + r.Source}
		for k, v := range r.Extra {
			ep.Extra[k] = v
		}
		if ns, name, ok := strings.Cut(r.Pod, "/"); ok {
			ep.PodNamespace, ep.PodName = ns, name
		}
		if err := st.PutEndpoint(ep); err != nil {
			return err
		}
	}
	return nil
}
