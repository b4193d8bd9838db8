package cli

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// topology is the node as `cnibox inspect topology` shows it.
type topology struct {
	Bridges  []topoBridge  `json:"bridges"`
	Overlays []topoOverlay `json:"overlays"`
	// Unattached are endpoints recorded without a bridge (other plugins).
	Unattached []topoPod `json:"unattached,omitempty"`
}

type topoBridge struct {
	Name  string         `json:"name"`
	Up    bool           `json:"up"`
	MTU   int            `json:"mtu,omitempty"`
	MAC   string         `json:"mac,omitempty"`
	Addrs []netip.Prefix `json:"addrs,omitempty"`
	// Missing: endpoint records name the bridge, but the kernel has none.
	Missing bool       `json:"missing,omitempty"`
	Ports   []topoPort `json:"ports"`
}

type topoPort struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
	Up   bool   `json:"up"`
	MTU  int    `json:"mtu,omitempty"`
	// Missing: an endpoint record names this host veth, but it is gone.
	Missing bool     `json:"missing,omitempty"`
	Pod     *topoPod `json:"pod,omitempty"`
}

type topoPod struct {
	Network     string         `json:"network"`
	ContainerID string         `json:"containerID"`
	IfName      string         `json:"ifName"`
	Pod         string         `json:"pod,omitempty"`
	Netns       string         `json:"netns,omitempty"`
	NetnsExists bool           `json:"netnsExists"`
	IPs         []netip.Prefix `json:"ips,omitempty"`
	MAC         string         `json:"mac,omitempty"`
}

type topoOverlay struct {
	Device  string              `json:"device"`
	Kind    string              `json:"kind"`
	Up      bool                `json:"up"`
	MTU     int                 `json:"mtu,omitempty"`
	VNI     int                 `json:"vni,omitempty"`
	Local   netip.Addr          `json:"local,omitzero"`
	Addrs   []netip.Prefix      `json:"addrs,omitempty"`
	Missing bool                `json:"missing,omitempty"`
	Lease   *store.OverlayLease `json:"lease,omitempty"`
	Peers   []store.OverlayPeer `json:"peers,omitempty"`
	// From the agent's record: ready, when the kernel last matched the peers.
	Ready    bool      `json:"ready"`
	LastSync time.Time `json:"lastSync,omitzero"`
}

func runTopology(c *ucli.Context, host *netops.Handle) error {
	format := c.String("format")
	if c.Bool("json") {
		format = "json"
	}
	if format != "text" && format != "dot" && format != "json" {
		return usageError(c, fmt.Errorf("--format %q: want text, dot or json", format), false)
	}
	var eps []store.Endpoint
	var overlays []store.OverlayState
	if err := readStore(c, func(st *store.Store) error {
		var err error
		if eps, err = st.Endpoints(""); err != nil {
			return err
		}
		overlays, err = st.Overlays()
		return err
	}); err != nil {
		return err
	}
	topo, err := buildTopology(host, eps, overlays)
	if err != nil {
		return err
	}
	w := c.App.Writer
	switch format {
	case "json":
		return writeJSON(w, topo)
	case "dot":
		printDot(w, topo)
	default:
		printTree(w, topo)
	}
	return nil
}

// buildTopology joins the kernel's links with the endpoint and overlay
// records.
func buildTopology(host *netops.Handle, eps []store.Endpoint, overlays []store.OverlayState) (topology, error) {
	links, err := host.Links()
	if err != nil {
		return topology{}, err
	}
	topo := topology{Bridges: []topoBridge{}, Overlays: []topoOverlay{}}
	byVeth := map[string]store.Endpoint{}
	for _, ep := range eps {
		if ep.HostVeth != "" {
			byVeth[ep.HostVeth] = ep
		}
	}
	podOf := func(ep store.Endpoint) *topoPod {
		p := &topoPod{Network: ep.Network, ContainerID: ep.ContainerID, IfName: ep.IfName, Pod: podName(ep),
			Netns: ep.Netns, IPs: ep.IPs, MAC: ep.MAC}
		if ep.Netns != "" {
			p.NetnsExists, _ = netops.NetnsExists(ep.Netns)
		}
		return p
	}
	seenVeth := map[string]bool{}
	bridgeIdx := map[string]int{}
	for _, l := range links {
		if l.Kind != "bridge" {
			continue
		}
		b := topoBridge{Name: l.Name, Up: l.Up, MTU: l.MTU, MAC: l.MAC.String(), Ports: []topoPort{}}
		b.Addrs, _ = host.Addrs(l.Name)
		for _, p := range links {
			if p.MasterIndex != l.Index {
				continue
			}
			port := topoPort{Name: p.Name, Kind: p.Kind, Up: p.Up, MTU: p.MTU}
			if ep, ok := byVeth[p.Name]; ok {
				port.Pod = podOf(ep)
				seenVeth[p.Name] = true
			}
			b.Ports = append(b.Ports, port)
		}
		bridgeIdx[l.Name] = len(topo.Bridges)
		topo.Bridges = append(topo.Bridges, b)
	}
	for _, ep := range eps {
		if ep.HostVeth != "" && seenVeth[ep.HostVeth] {
			continue
		}
		if ep.Bridge == "" {
			topo.Unattached = append(topo.Unattached, *podOf(ep))
			continue
		}
		i, ok := bridgeIdx[ep.Bridge]
		if !ok {
			i = len(topo.Bridges)
			bridgeIdx[ep.Bridge] = i
			topo.Bridges = append(topo.Bridges, topoBridge{Name: ep.Bridge, Missing: true, Ports: []topoPort{}})
		}
		port := topoPort{Name: ep.HostVeth, Kind: "veth", Missing: true, Pod: podOf(ep)}
		// A veth that exists but is not on the bridge.
		for _, l := range links {
			if l.Name == ep.HostVeth {
				port.Missing, port.Up, port.MTU, port.Kind = false, l.Up, l.MTU, l.Kind
			}
		}
		topo.Bridges[i].Ports = append(topo.Bridges[i].Ports, port)
	}
	recorded := map[string]store.OverlayState{}
	for _, st := range overlays {
		recorded[st.Lease.Device] = st
		if st.Lease.Device6 != "" {
			recorded[st.Lease.Device6] = st
		}
	}
	seenOverlay := map[string]bool{}
	for _, l := range links {
		if l.Kind != "vxlan" {
			continue
		}
		o := topoOverlay{Device: l.Name, Kind: l.Kind, Up: l.Up, MTU: l.MTU}
		if v, err := host.VXLANByName(l.Name); err == nil {
			o.VNI, o.Local = v.VNI, v.Local
		}
		o.Addrs, _ = host.Addrs(l.Name)
		if st, ok := recorded[l.Name]; ok {
			addOverlayRecord(&o, st)
		}
		seenOverlay[l.Name] = true
		topo.Overlays = append(topo.Overlays, o)
	}
	for dev, st := range recorded {
		if !seenOverlay[dev] && !st.Stopped {
			o := topoOverlay{Device: dev, Kind: "vxlan", Missing: true}
			addOverlayRecord(&o, st)
			topo.Overlays = append(topo.Overlays, o)
		}
	}
	sort.Slice(topo.Overlays, func(i, j int) bool { return topo.Overlays[i].Device < topo.Overlays[j].Device })
	return topo, nil
}

func addOverlayRecord(o *topoOverlay, st store.OverlayState) {
	lease := st.Lease
	o.Lease, o.Peers, o.Ready, o.LastSync = &lease, st.Peers, st.Ready, st.LastSync
}

// printTree prints the topology as a tree.
func printTree(w io.Writer, t topology) {
	fmt.Fprintln(w, "node")
	type item struct {
		line string
		kids []item
	}
	var top []item
	for _, b := range t.Bridges {
		it := item{line: "bridge " + b.Name + " " + linkState(b.Up, b.MTU, b.Missing) + prefixes(b.Addrs)}
		for _, p := range b.Ports {
			line := p.Name + " " + orEmpty(p.Kind+" ", p.Kind) + linkState(p.Up, p.MTU, p.Missing)
			if p.Pod != nil {
				line += " -> " + podLine(*p.Pod)
			} else if p.Kind == "veth" {
				line += " -> no endpoint record"
			}
			it.kids = append(it.kids, item{line: line})
		}
		if len(b.Ports) == 0 {
			it.kids = append(it.kids, item{line: "(no ports)"})
		}
		top = append(top, it)
	}
	for _, o := range t.Overlays {
		line := o.Kind + " " + o.Device + " " + linkState(o.Up, o.MTU, o.Missing)
		if o.VNI != 0 {
			line += fmt.Sprintf(" vni %d", o.VNI)
		}
		if o.Local.IsValid() {
			line += " local " + o.Local.String()
		}
		line += prefixes(o.Addrs)
		it := item{line: line}
		if o.Lease != nil {
			l := o.Lease
			state := "not ready"
			if o.Ready {
				state = "ready"
			}
			sync := ""
			if !o.LastSync.IsZero() {
				sync = ", synced " + o.LastSync.Local().Format("2006-01-02 15:04:05")
			}
			it.kids = append(it.kids, item{line: fmt.Sprintf("lease %s of %s (%s backend, %s%s)", prefixOrDash(l.Subnet), prefixOrDash(l.Network), orDash(l.Backend), state, sync)})
		}
		for _, p := range o.Peers {
			it.kids = append(it.kids, item{line: peerLine(p)})
		}
		top = append(top, it)
	}
	for _, p := range t.Unattached {
		top = append(top, item{line: podLine(p) + " (no bridge)"})
	}
	var walk func(items []item, indent string)
	walk = func(items []item, indent string) {
		for i, it := range items {
			branch, next := "├── ", "│   "
			if i == len(items)-1 {
				branch, next = "└── ", "    "
			}
			fmt.Fprintln(w, indent+branch+it.line)
			walk(it.kids, indent+next)
		}
	}
	walk(top, "")
}

func linkState(up bool, mtu int, missing bool) string {
	if missing {
		return "(MISSING)"
	}
	s := "DOWN"
	if up {
		s = "up"
	}
	if mtu > 0 {
		s += fmt.Sprintf(", mtu %d", mtu)
	}
	return "(" + s + ")"
}

func prefixes(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return ""
	}
	return " " + strings.ReplaceAll(joinStrings(ps), ",", " ")
}

func podLine(p topoPod) string {
	s := "pod " + orDash(p.Pod) + " " + p.IfName + " " + strings.ReplaceAll(joinStrings(p.IPs), ",", " ")
	s += " [" + p.Network + " " + short(p.ContainerID)
	if p.Netns != "" {
		s += " netns " + p.Netns
		if !p.NetnsExists {
			s += " GONE"
		}
	}
	return s + "]"
}

func peerLine(p store.OverlayPeer) string {
	var subs []string
	for _, s := range []netip.Prefix{p.Subnet, p.Subnet6} {
		if s.IsValid() {
			subs = append(subs, s.String())
		}
	}
	var at []string
	for _, a := range []netip.Addr{p.PublicIP, p.PublicIPv6} {
		if a.IsValid() {
			at = append(at, a.String())
		}
	}
	s := "peer " + strings.Join(subs, " ") + " at " + strings.Join(at, " ")
	if p.Direct {
		s += " (direct route)"
	} else if p.VTEPMAC != "" {
		s += " vtep " + p.VTEPMAC
	}
	return s
}

// printDot prints the topology as a Graphviz digraph.
func printDot(w io.Writer, t topology) {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
	fmt.Fprintln(w, "digraph cnibox {")
	fmt.Fprintln(w, "  rankdir=LR;")
	fmt.Fprintln(w, `  node [shape=box, fontname="monospace", fontsize=10];`)
	fmt.Fprintln(w, `  node_ [label="node", shape=house];`)
	for _, b := range t.Bridges {
		id := q("br:" + b.Name)
		label := "bridge " + b.Name + "\\n" + linkState(b.Up, b.MTU, b.Missing)
		for _, a := range b.Addrs {
			label += "\\n" + a.String()
		}
		fmt.Fprintf(w, "  %s [label=%s, shape=box3d%s];\n", id, q(label), missingStyle(b.Missing))
		fmt.Fprintf(w, "  node_ -> %s;\n", id)
		for _, p := range b.Ports {
			pid := q("if:" + p.Name)
			fmt.Fprintf(w, "  %s [label=%s%s];\n", pid, q(p.Name+"\\n"+linkState(p.Up, p.MTU, p.Missing)), missingStyle(p.Missing))
			fmt.Fprintf(w, "  %s -> %s;\n", id, pid)
			if p.Pod != nil {
				pod := q("pod:" + p.Pod.Network + "/" + p.Pod.ContainerID + "/" + p.Pod.IfName)
				label := "pod " + orDash(p.Pod.Pod) + "\\n" + p.Pod.IfName + " " + strings.ReplaceAll(joinStrings(p.Pod.IPs), ",", "\\n")
				fmt.Fprintf(w, "  %s [label=%s, shape=ellipse%s];\n", pod, q(label), missingStyle(!p.Pod.NetnsExists))
				fmt.Fprintf(w, "  %s -> %s;\n", pid, pod)
			}
		}
	}
	for _, o := range t.Overlays {
		id := q("ov:" + o.Device)
		label := o.Kind + " " + o.Device + "\\n" + linkState(o.Up, o.MTU, o.Missing)
		if o.VNI != 0 {
			label += fmt.Sprintf("\\nvni %d", o.VNI)
		}
		fmt.Fprintf(w, "  %s [label=%s, shape=hexagon%s];\n", id, q(label), missingStyle(o.Missing))
		fmt.Fprintf(w, "  node_ -> %s;\n", id)
		for _, p := range o.Peers {
			pid := q("peer:" + p.Subnet.String() + p.Subnet6.String())
			fmt.Fprintf(w, "  %s [label=%s, shape=oval];\n", pid, q(peerLine(p)))
			fmt.Fprintf(w, "  %s -> %s [style=dashed];\n", id, pid)
		}
	}
	for _, p := range t.Unattached {
		pod := q("pod:" + p.Network + "/" + p.ContainerID + "/" + p.IfName)
		fmt.Fprintf(w, "  %s [label=%s, shape=ellipse];\n  node_ -> %s;\n", pod, q(podLine(p)), pod)
	}
	fmt.Fprintln(w, "}")
}

func missingStyle(missing bool) string {
	if missing {
		return `, style=dashed, color=red`
	}
	return ""
}
