package cli

import (
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
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/store"
)

func storeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "store",
		Usage: "check the node's store file, or rebuild it from the kernel",
		Subcommands: []*ucli.Command{
			{
				Name:  "check",
				Usage: "read the whole store: pages, records, IPAM indexes; exit 1 on any problem",
				UsageText: "cnibox store check [--data-dir DIR] [--json]\n\n" +
					"Reads every page and record of the store file and checks the IPAM indexes against the\n" +
					"reservations. Exit 0: sound. Exit 1: problems (listed), or the file cannot be read at all;\n" +
					"then `cnibox store rebuild` makes a new one.",
				Flags:  []ucli.Flag{dataDirFlag, jsonFlag},
				Action: runStoreCheck,
			},
			{
				Name:  "rebuild",
				Usage: "make a new store from the veths, namespaces and libcni cache of the node; the old file is kept aside",
				UsageText: "cnibox store rebuild [--data-dir DIR] [--conf-dir DIR] [--cache-dir DIR] [--dry-run] [--json]\n\n" +
					"For a store that cannot be read (or whose check fails). It finds every host veth of cnibox's\n" +
					"bridge role (cbx*) and its peer in the pod namespaces that exist (/run/netns/*, /proc/*/ns/net),\n" +
					"names the attachment from libcni's cache (container ID, network, pod) or, failing that, from the\n" +
					"network config that uses the veth's bridge, and records the pod's addresses as reservations and\n" +
					"the attachment as an endpoint. Attachments of other main plugins that use host-local are\n" +
					"recovered from libcni's cache when their namespace still has the interface.\n" +
					"Not recovered: sticky addresses of pods that are not running, round-robin positions, and the\n" +
					"records of the meta roles, portmap and the overlay agent (the agent writes its own again).\n" +
					"A veth with no cache entry is recorded under the container ID rebuilt-<veth>: its address stays\n" +
					"reserved until the runtime's GC or `cnibox gc` drops it; DEL of the real container cannot.",
				Flags: []ucli.Flag{dataDirFlag, confDirFlag, cacheFlag, jsonFlag,
					&ucli.BoolFlag{Name: "dry-run", Usage: "show what would be recorded; change nothing"}},
				Action: runStoreRebuild,
			},
		},
	}
}

// checkOutput is `cnibox store check --json`.
type checkOutput struct {
	Path     string             `json:"path"`
	Readable bool               `json:"readable"`
	Error    string             `json:"error,omitempty"`
	Report   *store.CheckReport `json:"report,omitempty"`
}

func runStoreCheck(c *ucli.Context) error {
	dir := store.Dir(c.String("data-dir"))
	path := filepath.Join(dir, store.FileName)
	out := checkOutput{Path: path}
	st, err := store.OpenWith(dir, store.Options{NoCreate: true})
	if errors.Is(err, store.ErrNotFound) {
		fmt.Fprintf(c.App.Writer, "%s: no store file (nothing was ever stored on this node): nothing to check\n", path)
		return nil
	}
	if err == nil {
		var rep store.CheckReport
		rep, err = st.Check()
		st.Close()
		out.Report = &rep
	}
	if err != nil {
		out.Error = err.Error()
	} else {
		out.Readable = true
	}
	if c.Bool("json") {
		if werr := writeJSON(c.App.Writer, out); werr != nil {
			return werr
		}
	} else {
		printCheck(c, out)
	}
	if err != nil || len(out.Report.Problems) > 0 {
		return &exitError{code: 1}
	}
	return nil
}

func printCheck(c *ucli.Context, out checkOutput) {
	w := c.App.Writer
	if !out.Readable {
		fmt.Fprintf(w, "%s: cannot be read: %s\n", out.Path, out.Error)
		fmt.Fprintf(w, "recover: cnibox store rebuild --data-dir %s\n", filepath.Dir(out.Path))
		return
	}
	rep := out.Report
	schema := fmt.Sprint(rep.Schema)
	if rep.Schema == 0 {
		schema = "1 (not recorded: written before versions were)"
	}
	fmt.Fprintf(w, "%s: %d bytes, schema %s, last reclaim in boot %s\n", rep.Path, rep.Size, schema, orDash(rep.Boot))
	fmt.Fprintf(w, "endpoint records: %d\n", rep.Endpoints)
	for _, n := range rep.Networks {
		fmt.Fprintf(w, "network %s: %d reservations, %d sticky pods\n", n.Name, n.Reservations, n.Sticky)
	}
	var names []string
	for name := range rep.Buckets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "bucket %s: %d keys\n", name, rep.Buckets[name])
	}
	if len(rep.Problems) == 0 {
		fmt.Fprintln(w, "ok: no problems")
		return
	}
	fmt.Fprintf(w, "%d problems:\n", len(rep.Problems))
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "  "+p)
	}
	fmt.Fprintf(w, "recover: cnibox store rebuild --data-dir %s\n", filepath.Dir(rep.Path))
}

// recovered is one attachment that rebuild found on the node.
type recovered struct {
	Network     string         `json:"network"`
	ContainerID string         `json:"containerID"`
	IfName      string         `json:"ifName"`
	Netns       string         `json:"netns"`
	Pod         string         `json:"pod,omitempty"`
	Bridge      string         `json:"bridge,omitempty"`
	HostVeth    string         `json:"hostVeth,omitempty"`
	MAC         string         `json:"mac,omitempty"`
	IPs         []netip.Prefix `json:"ips"`
	// Source says where the owner came from: "cache" (libcni's cache) or
	// "config" (the network config of the bridge; container ID unknown).
	Source string `json:"source"`
}

// rebuildOutput is `cnibox store rebuild --json`.
type rebuildOutput struct {
	Path        string      `json:"path"`
	DryRun      bool        `json:"dryRun"`
	Backup      string      `json:"backup,omitempty"`
	Attachments []recovered `json:"attachments"`
	Warnings    []string    `json:"warnings,omitempty"`
}

func runStoreRebuild(c *ucli.Context) error {
	dir := store.Dir(c.String("data-dir"))
	out := rebuildOutput{Path: filepath.Join(dir, store.FileName), DryRun: c.Bool("dry-run"), Attachments: []recovered{}}
	found, warnings, err := discover(c.String("conf-dir"), c.String("cache-dir"))
	if err != nil {
		return err
	}
	out.Attachments, out.Warnings = found, warnings
	if !out.DryRun {
		out.Backup, err = store.Rebuild(dir, store.Options{}, func(st *store.Store) error {
			return record(st, found, c.String("conf-dir"), c.App.ErrWriter)
		})
		if err != nil {
			return err
		}
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, out)
	}
	w := newTable(c.App.Writer)
	row(w, "NETWORK", "CONTAINER", "IFNAME", "POD", "IPS", "HOST VETH", "NETNS", "FROM")
	for _, a := range out.Attachments {
		row(w, a.Network, short(a.ContainerID), a.IfName, orDash(a.Pod), joinStrings(a.IPs), orDash(a.HostVeth), a.Netns, a.Source)
	}
	w.Flush()
	for _, warn := range out.Warnings {
		fmt.Fprintln(c.App.ErrWriter, "warning:", warn)
	}
	switch {
	case out.DryRun:
		fmt.Fprintf(c.App.Writer, "dry run: %d attachments would be recorded in %s\n", len(out.Attachments), out.Path)
	case out.Backup != "":
		fmt.Fprintf(c.App.Writer, "rebuilt %s with %d attachments; the old file is kept as %s\n", out.Path, len(out.Attachments), out.Backup)
	default:
		fmt.Fprintf(c.App.Writer, "created %s with %d attachments\n", out.Path, len(out.Attachments))
	}
	return nil
}

// netConf is what rebuild needs of a network config: which bridge and IPAM
// it uses.
type netConf struct {
	name, bridge, ipam string
	sticky             bool
}

// bridgeNetworks reads the network configs of confDir: bridge name -> the
// networks whose bridge plugin uses it, and network name -> config.
func bridgeNetworks(confDir string) (map[string][]netConf, map[string]netConf) {
	byBridge, byName := map[string][]netConf{}, map[string]netConf{}
	files, _ := libcni.ConfFiles(confDir, confExtensions)
	for _, f := range files {
		l, err := loadConfFile(f)
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
			if pc.Type == "bridge" {
				if nc.bridge == "" {
					nc.bridge = bridge.DefaultBridge
				}
				byBridge[nc.bridge] = append(byBridge[nc.bridge], nc)
				byName[l.Name] = nc
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

// discover finds the attachments on the node: host veths of the bridge role
// matched with their peers in the pod namespaces, owners from libcni's
// cache or the configs; and cached attachments of other main plugins whose
// interface is still in their namespace.
func discover(confDir, cacheDir string) ([]recovered, []string, error) {
	var warnings []string
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
	byBridge, byName := bridgeNetworks(confDir)
	cached, err := libcni.NewCNIConfigWithCacheDir(nil, cacheDir, nil).GetCachedAttachments("")
	if err != nil {
		warn("libcni's cache in %s cannot be read (%v): container IDs come from nowhere else", cacheDir, err)
	}
	cacheByVeth := map[string]*libcni.NetworkAttachment{}
	for _, a := range cached {
		cacheByVeth[bridge.HostVethName(a.ContainerID, a.IfName)] = a
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

	var out []recovered
	done := map[string]bool{} // network/cid/ifname
	for _, hv := range links {
		if hv.Kind != "veth" || !bridge.IsHostVeth(hv.Name) {
			continue
		}
		br, ok := byIndex[hv.MasterIndex]
		if !ok {
			warn("veth %s is on no bridge: skipped", hv.Name)
			continue
		}
		nsid, err := host.PeerNetnsID(hv.Name)
		p, ok := peers[[2]int{nsid, hv.PeerIndex}]
		if err != nil || !ok || p.link.PeerIndex != hv.Index {
			warn("veth %s on %s: its peer is in no namespace this process can see: skipped", hv.Name, br.Name)
			continue
		}
		r := recovered{Bridge: br.Name, HostVeth: hv.Name, Netns: p.netns, IfName: p.link.Name, MAC: p.link.MAC.String(), IPs: p.addrs}
		if a, ok := cacheByVeth[hv.Name]; ok && a.IfName == p.link.Name {
			r.Network, r.ContainerID, r.Pod, r.Source = a.Network, a.ContainerID, cachedPod(a), "cache"
			if a.NetNS != "" && a.NetNS != p.netns && store.IsNetns(a.NetNS) {
				r.Netns = a.NetNS
			}
		} else {
			nets := byBridge[br.Name]
			if len(nets) != 1 {
				warn("veth %s on bridge %s: no libcni cache entry, and %d network configs in %s use that bridge: its addresses %v are not reserved", hv.Name, br.Name, len(nets), confDir, p.addrs)
				continue
			}
			r.Network, r.ContainerID, r.Source = nets[0].name, "rebuilt-"+hv.Name, "config"
			warn("veth %s (%s, %v): no libcni cache entry: recorded as container %s", hv.Name, nets[0].name, p.addrs, r.ContainerID)
		}
		done[r.Network+"/"+r.ContainerID+"/"+r.IfName] = true
		out = append(out, r)
	}
	// Cached attachments of other main plugins, with host-local as IPAM.
	for _, a := range cached {
		nc, ok := byName[a.Network]
		if done[a.Network+"/"+a.ContainerID+"/"+a.IfName] || !ok || nc.ipam != "host-local" || a.NetNS == "" || !store.IsNetns(a.NetNS) {
			continue
		}
		h, err := netops.Open(a.NetNS)
		if err != nil {
			continue
		}
		l, lerr := h.LinkByName(a.IfName)
		addrs, aerr := h.Addrs(a.IfName)
		h.Close()
		if lerr != nil || aerr != nil || len(addrs) == 0 {
			continue
		}
		out = append(out, recovered{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.NetNS,
			Pod: cachedPod(a), MAC: l.MAC.String(), IPs: addrs, Source: "cache"})
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

// record writes the recovered attachments into the new store: one
// reservation per pod address, an endpoint record for each bridge
// attachment, sticky records for pods of sticky networks.
func record(st *store.Store, found []recovered, confDir string, warn io.Writer) error {
	_, byName := bridgeNetworks(confDir)
	now := time.Now().UTC()
	for _, r := range found {
		err := st.IPAM(r.Network, func(tx *store.IPAMTx) error {
			var addrs []netip.Addr
			for _, p := range r.IPs {
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
		if r.HostVeth == "" {
			continue
		}
		ep := store.Endpoint{Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName, Netns: r.Netns,
			Plugin: "bridge", Bridge: r.Bridge, HostVeth: r.HostVeth, MAC: r.MAC, IPs: r.IPs, Created: now,
			Extra: map[string]string{"rebuilt": "cnibox store rebuild, from " + r.Source}}
		if ns, name, ok := strings.Cut(r.Pod, "/"); ok {
			ep.PodNamespace, ep.PodName = ns, name
		}
		if err := st.PutEndpoint(ep); err != nil {
			return err
		}
	}
	return nil
}
