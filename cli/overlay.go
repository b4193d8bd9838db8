package cli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// The overlay commands show the VXLAN overlay as cnibox-agent mirrored it
// into the store, checked against the kernel: they need no etcd or
// Kubernetes client.

// overlayState reads the agent's record.
func overlayState(c *ucli.Context) (store.OverlayState, error) {
	st, dir, err := openStore(c)
	if errors.Is(err, store.ErrNotFound) {
		return store.OverlayState{}, fmt.Errorf("no overlay on this node: the store %s does not exist (is cnibox-agent running with --data-dir %s?)", dir, dir)
	}
	if err != nil {
		return store.OverlayState{}, err
	}
	defer st.Close()
	if d := c.String("device"); d != "" {
		s, found, err := st.Overlay(d)
		if err != nil {
			return s, err
		}
		if !found {
			return s, fmt.Errorf("no overlay with device %s in the store %s", d, dir)
		}
		return s, nil
	}
	all, err := st.Overlays()
	if err != nil {
		return store.OverlayState{}, err
	}
	switch len(all) {
	case 0:
		return store.OverlayState{}, fmt.Errorf("no overlay in the store %s: cnibox-agent has not run on this node (or uses another --data-dir)", dir)
	case 1:
		return all[0], nil
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Lease.Device)
	}
	return store.OverlayState{}, fmt.Errorf("several overlays on this node (%s): pick one with --device", strings.Join(names, ", "))
}

// ovlDevice is the kernel's view of the agent's device (VXLAN; a
// wireguard or ipip device has Kind and no VXLAN fields).
type ovlDevice struct {
	Name   string `json:"name"`
	Kind   string `json:"kind,omitempty"`
	Exists bool   `json:"exists"`
	Up     bool   `json:"up"`
	MTU    int    `json:"mtu,omitempty"`
	MAC    string `json:"mac,omitempty"`
	VNI    int    `json:"vni,omitempty"`
	Port   int    `json:"port,omitempty"`
	Error  string `json:"error,omitempty"`
}

type ovlStatus struct {
	store.OverlayLease
	Devices      []ovlDevice `json:"devices"`
	Ready        bool        `json:"ready"`
	AgentRunning bool        `json:"agentRunning"`
	AgentPID     int         `json:"agentPID,omitempty"`
	Peers        int         `json:"peers"`
	LastSync     time.Time   `json:"lastSync,omitzero"`
	Updated      time.Time   `json:"updated"`
}

func overlayStatus(c *ucli.Context, h *netops.Handle) error {
	s, err := overlayState(c)
	if err != nil {
		return err
	}
	out := ovlStatus{
		OverlayLease: s.Lease, Ready: s.Ready, AgentPID: s.AgentPID, Peers: len(s.Peers),
		LastSync: s.LastSync, Updated: s.Updated,
		AgentRunning: !s.Stopped && s.AgentPID > 0 && syscall.Kill(s.AgentPID, 0) == nil,
	}
	for _, name := range []string{s.Lease.Device, s.Lease.Device6} {
		if name == "" {
			continue
		}
		if s.Lease.Type == "host-gw" || s.Lease.Type == "alloc" {
			break // no device: the key is the backend's name
		}
		out.Devices = append(out.Devices, overlayDevice(h, name, s.Lease.Type == "" || s.Lease.Type == "vxlan"))
	}
	return show(c, out, printOvlStatus, nil)
}

// overlayDevice is what the node has of the overlay device name: the VXLAN
// fields of the vxlan backend's device, the kind of another backend's.
func overlayDevice(h *netops.Handle, name string, vxlan bool) ovlDevice {
	d := ovlDevice{Name: name}
	var err error
	if vxlan {
		var v netops.VXLAN
		if v, err = h.VXLANByName(name); err == nil {
			d.Up, d.MTU, d.MAC, d.VNI, d.Port = v.Up, v.MTU, v.MAC.String(), v.VNI, v.Port
		}
	} else {
		var l netops.Link
		if l, err = h.LinkByName(name); err == nil {
			d.Up, d.MTU, d.Kind = l.Up, l.MTU, l.Kind
		}
	}
	switch {
	case errors.Is(err, netops.ErrNotFound):
	case err != nil:
		d.Error = err.Error()
	default:
		d.Exists = true
	}
	return d
}

func printOvlStatus(out io.Writer, s ovlStatus) error {
	w := newTable(out)
	l := s.OverlayLease
	fmt.Fprintf(w, "backend:\t%s\n", l.Backend)
	if l.Type != "" {
		fmt.Fprintf(w, "type:\t%s\n", l.Type)
	}
	if l.Network.IsValid() {
		fmt.Fprintf(w, "network:\t%s\nsubnet:\t%s\n", l.Network, l.Subnet)
	}
	if l.Network6.IsValid() {
		fmt.Fprintf(w, "network6:\t%s\nsubnet6:\t%s\n", l.Network6, l.Subnet6)
	}
	fmt.Fprintf(w, "public IP:\t%s\n", ovlAddrs(l.PublicIP, l.PublicIPv6))
	fmt.Fprintf(w, "interface:\t%s\n", l.Iface)
	for _, d := range s.Devices {
		switch {
		case d.Error != "":
			fmt.Fprintf(w, "device:\t%s: %s\n", d.Name, d.Error)
		case !d.Exists:
			fmt.Fprintf(w, "device:\t%s MISSING (the agent re-creates it)\n", d.Name)
		case d.Kind != "":
			fmt.Fprintf(w, "device:\t%s %s, %s, mtu %d\n", d.Name, ovlUpDown(d.Up), d.Kind, d.MTU)
		default:
			fmt.Fprintf(w, "device:\t%s %s, vni %d, port %d, vtep %s, mtu %d\n", d.Name, ovlUpDown(d.Up), d.VNI, d.Port, d.MAC, d.MTU)
		}
	}
	fmt.Fprintf(w, "mtu (pods):\t%d\n", l.MTU)
	fmt.Fprintf(w, "ip masquerade:\t%v\n", l.IPMasq)
	fmt.Fprintf(w, "subnet file:\t%s\n", l.SubnetFile)
	fmt.Fprintf(w, "lease:\tacquired %s, expires %s\n", ovlTime(l.Acquired), ovlTime(l.Expires))
	agent := "stopped"
	if s.AgentRunning {
		agent = fmt.Sprintf("running (pid %d)", s.AgentPID)
	}
	fmt.Fprintf(w, "agent:\t%s\n", agent)
	fmt.Fprintf(w, "ready:\t%v\n", s.Ready)
	fmt.Fprintf(w, "peers:\t%d\n", s.Peers)
	fmt.Fprintf(w, "last sync:\t%s\n", ovlTime(s.LastSync))
	return w.Flush()
}

// ovlPeer is one peer and whether the kernel holds what it needs.
type ovlPeer struct {
	store.OverlayPeer
	ovlEntries // on the IPv4 device
	// Route6/Neigh6/FDB6: the same for the IPv6 device (dual stack).
	Route6 *bool `json:"route6,omitempty"`
	Neigh6 *bool `json:"neighbor6,omitempty"`
	FDB6   *bool `json:"fdb6,omitempty"`
	OK     bool  `json:"ok"`
}

func overlayPeers(c *ucli.Context, h *netops.Handle) error {
	s, err := overlayState(c)
	if err != nil {
		return err
	}
	k4 := ovlReadKernel(h, s.Lease.Device, s.Lease.Iface)
	var k6 ovlKernel
	if s.Lease.Device6 != "" {
		k6 = ovlReadKernel(h, s.Lease.Device6, s.Lease.Iface)
	}
	out := make([]ovlPeer, 0, len(s.Peers))
	for _, p := range s.Peers {
		ps := ovlPeer{OverlayPeer: p, OK: true}
		if p.Subnet.IsValid() {
			ps.ovlEntries = k4.check(p.Subnet, p.PublicIP, p.VTEPMAC, p.Direct)
			ps.OK = ps.all()
		}
		if p.Subnet6.IsValid() && s.Lease.Device6 != "" {
			e := k6.check(p.Subnet6, p.PublicIPv6, p.VTEPMAC6, false)
			ps.Route6, ps.Neigh6, ps.FDB6 = &e.Route, &e.Neigh, &e.FDB
			ps.OK = ps.OK && e.all()
		}
		out = append(out, ps)
	}
	return show(c, out, printOvlPeers, nil)
}

func printOvlPeers(out io.Writer, peers []ovlPeer) error {
	w := newTable(out)
	fmt.Fprintln(w, "SUBNET\tPUBLIC IP\tVTEP MAC\tROUTE\tNEIGHBOR\tFDB")
	for _, p := range peers {
		mac := p.VTEPMAC
		if p.Direct {
			mac = "(direct)"
		}
		subnets := ovlPrefixes(p.Subnet, p.Subnet6)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", subnets, ovlAddrs(p.PublicIP, p.PublicIPv6), mac,
			ovlOK(p.Route, p.Route6), ovlOK(p.Neigh, p.Neigh6), ovlOK(p.FDB, p.FDB6))
	}
	return w.Flush()
}

// ovlEntries says which of the kernel entries a peer needs are there.
type ovlEntries struct {
	Route bool `json:"route"`
	Neigh bool `json:"neighbor"`
	FDB   bool `json:"fdb"`
}

// all reports whether every entry is there.
func (e ovlEntries) all() bool { return e.Route && e.Neigh && e.FDB }

// ovlKernel is what is programmed on a device (and direct routes on the
// underlay interface).
type ovlKernel struct {
	dev    string
	routes []netops.Route
	under  []netops.Route
	neighs []netops.Neigh
	fdb    []netops.FDBEntry
}

func ovlReadKernel(h *netops.Handle, dev, iface string) ovlKernel {
	k := ovlKernel{dev: dev}
	k.routes, _ = h.Routes(dev)
	if iface != "" {
		k.under, _ = h.Routes(iface)
	}
	k.neighs, _ = h.Neighs(dev)
	k.fdb, _ = h.FDB(dev)
	return k
}

// check reports whether the route, neighbour and FDB entry of a peer are
// there. A direct peer needs only its route (via its public IP); neighbour
// and FDB count as present.
func (k ovlKernel) check(subnet netip.Prefix, public netip.Addr, mac string, direct bool) (e ovlEntries) {
	if direct {
		for _, r := range k.under {
			e.Route = e.Route || (r.Dst == subnet && r.GW == public)
		}
		e.Neigh, e.FDB = true, true
		return e
	}
	gw := subnet.Addr()
	for _, r := range k.routes {
		e.Route = e.Route || (r.Dst == subnet && r.GW == gw && r.Onlink)
	}
	for _, n := range k.neighs {
		e.Neigh = e.Neigh || (n.IP == gw && n.MAC.String() == mac && n.Permanent)
	}
	for _, f := range k.fdb {
		e.FDB = e.FDB || (f.MAC.String() == mac && f.Dst == public)
	}
	return e
}

func ovlOK(v4 bool, v6 *bool) string {
	s := map[bool]string{true: "ok", false: "MISSING"}[v4]
	if v6 != nil {
		s += "/" + map[bool]string{true: "ok", false: "MISSING"}[*v6]
	}
	return s
}

func ovlUpDown(up bool) string {
	if up {
		return "up"
	}
	return "DOWN"
}

func ovlTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func ovlAddrs(as ...netip.Addr) string {
	var s []string
	for _, a := range as {
		if a.IsValid() {
			s = append(s, a.String())
		}
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func ovlPrefixes(ps ...netip.Prefix) string {
	var s []string
	for _, p := range ps {
		if p.IsValid() {
			s = append(s, p.String())
		}
	}
	return strings.Join(s, ",")
}
