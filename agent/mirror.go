package agent

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"time"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/store"
)

// mirrorDelay bounds how often the agent writes its state to the store while
// peers keep changing (many nodes joining at once).
const mirrorDelay = time.Second

// mirrorSettle is how long the agent waits after a change before it writes
// the store: the kernel is programmed at once, the bookkeeping (a bbolt
// transaction with every peer, fsync) comes once the burst is over, so it
// never competes for the CPU with the other nodes still applying the same
// change (measured: it was half of an agent's CPU per event, and with N
// agents on few cores it delayed a removal reaching the last node by
// ~100 ms at N=200).
const mirrorSettle = 500 * time.Millisecond

// stored returns the state the store holds for device, if any.
func storedState(dataDir, device string) (store.OverlayState, bool, error) {
	st, err := store.OpenWith(store.Dir(dataDir), store.Options{NoCreate: true})
	if err != nil {
		return store.OverlayState{}, false, nil //nolint:nilerr // no store yet: nothing stored
	}
	defer st.Close()
	return st.Overlay(device)
}

// mirror writes the agent's state to the node's store, so the vxlan role
// and the CLI read it without a client of the backend.
func (a *agent) mirror(stopped bool) error {
	s := store.OverlayState{
		Lease:    a.storeLease(),
		Ready:    a.ready,
		LastSync: a.lastSync,
		AgentPID: os.Getpid(),
		Stopped:  stopped,
		Peers:    make([]store.OverlayPeer, 0, len(a.peers)),
	}
	for _, l := range a.peers {
		p := store.OverlayPeer{
			Subnet: l.Subnet, Subnet6: l.Subnet6,
			PublicIP: l.Attrs.PublicIP, PublicIPv6: l.Attrs.PublicIPv6,
		}
		if l.Attrs.VTEPMAC != nil {
			p.VTEPMAC = l.Attrs.VTEPMAC.String()
		}
		if l.Attrs.VTEPMAC6 != nil {
			p.VTEPMAC6 = l.Attrs.VTEPMAC6.String()
		}
		if d, ok := a.be.(backend.DirectRouter); ok {
			p.Direct = d.Direct(l)
		}
		s.Peers = append(s.Peers, p)
	}
	sort.Slice(s.Peers, func(i, j int) bool { return lessPrefix(s.Peers[i].Subnet, s.Peers[j].Subnet) })
	st, err := store.Open(store.Dir(a.o.DataDir))
	if err != nil {
		return fmt.Errorf("mirror the overlay state: %w", err)
	}
	defer st.Close()
	if err := st.PutOverlay(s); err != nil {
		return fmt.Errorf("mirror the overlay state: %w", err)
	}
	a.mirrored = time.Now()
	return nil
}

func (a *agent) storeLease() store.OverlayLease {
	l := store.OverlayLease{
		Backend:    a.o.Manager.Name(),
		Type:       a.cfg.Backend.Type,
		Node:       a.o.NodeName,
		Iface:      a.under.Iface,
		PublicIP:   a.under.Public4,
		PublicIPv6: a.under.Public6,
		VNI:        a.cfg.Backend.VNI,
		Port:       a.cfg.Backend.Port,
		MTU:        a.mtu,
		IPMasq:     a.o.IPMasq,
		SubnetFile: a.o.SubnetFile,
		Acquired:   a.acquired,
		Expires:    a.own.Expiration,
	}
	if a.cfg.EnableIPv4 {
		l.Network, l.Subnet = a.cfg.Network, a.own.Subnet
	}
	if a.cfg.EnableIPv6 {
		l.Network6, l.Subnet6 = a.cfg.IPv6Network, a.own.Subnet6
	}
	// The device of each family (the backend's name when it has none:
	// host-gw, alloc), the store's key: the IPv6 one is the second device
	// (vxlan, wireguard in Mode separate), or the one device of an
	// IPv6-only network.
	l.Device = a.deviceName()
	if devs := a.be.Devices(); a.cfg.EnableIPv6 && (len(devs) > 1 || (len(devs) == 1 && !a.cfg.EnableIPv4)) {
		l.Device6 = devs[len(devs)-1]
	}
	var at lease.Attrs
	a.be.Publish(&at)
	if at.VTEPMAC != nil {
		l.VTEPMAC = at.VTEPMAC.String()
	}
	if at.VTEPMAC6 != nil {
		l.VTEPMAC6 = at.VTEPMAC6.String()
	}
	return l
}

func lessPrefix(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}

// parseMAC parses a MAC recorded in the store.
func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err == nil && len(mac) != 6 {
		err = fmt.Errorf("%q is not an Ethernet address", s)
	}
	return mac, err
}

// storedMAC returns the VTEP MAC of the stored lease l for the v6 or v4
// device, when l is this node's: its public IP of that family is the one
// the agent found now. A data directory copied from another node (nodes
// made from one disk image) holds that node's lease, whose MAC would make
// two nodes one VTEP.
func storedMAC(l store.OverlayLease, v6 bool, under underlay, node string) (net.HardwareAddr, bool) {
	if l.Node != "" && l.Node != node {
		return nil, false // another node's store (a copied disk image)
	}
	ip := pick(v6, l.PublicIP, l.PublicIPv6)
	if !ip.IsValid() || ip != pick(v6, under.Public4, under.Public6) {
		return nil, false
	}
	mac, err := parseMAC(pick(v6, l.VTEPMAC, l.VTEPMAC6))
	return mac, err == nil
}

// storedAttrs are the VTEP MACs of the stored lease l that are this
// node's (storedMAC), as its lease published them.
func storedAttrs(l store.OverlayLease, under underlay, node string) lease.Attrs {
	var at lease.Attrs
	if mac, ok := storedMAC(l, false, under, node); ok {
		at.VTEPMAC = mac
	}
	if mac, ok := storedMAC(l, true, under, node); ok {
		at.VTEPMAC6 = mac
	}
	return at
}
