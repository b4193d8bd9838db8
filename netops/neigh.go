package netops

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Neigh is an entry of the neighbour (ARP/NDP) table.
type Neigh struct {
	Dev       string
	IP        netip.Addr
	MAC       net.HardwareAddr // nil when the entry has none (incomplete, failed)
	Permanent bool             // NUD_PERMANENT: set by hand, never ages
}

// String formats n like `ip neigh`.
func (n Neigh) String() string {
	s := n.IP.String() + " dev " + n.Dev
	if n.MAC != nil {
		s += " lladdr " + n.MAC.String()
	}
	if n.Permanent {
		s += " PERMANENT"
	}
	return s
}

// FDBEntry is a forwarding database entry of a VXLAN device: frames to MAC
// are sent to the remote VTEP Dst.
type FDBEntry struct {
	Dev       string
	MAC       net.HardwareAddr
	Dst       netip.Addr // the remote VTEP; zero when the entry has none
	Permanent bool
}

// String formats e like `bridge fdb`.
func (e FDBEntry) String() string {
	s := e.MAC.String() + " dev " + e.Dev
	if e.Dst.IsValid() {
		s += " dst " + e.Dst.String()
	}
	s += " self"
	if e.Permanent {
		s += " permanent"
	}
	return s
}

// EnsureNeigh makes ip resolve to mac on dev with a permanent entry
// (`ip neigh replace IP lladdr MAC dev DEV nud permanent`).
func (h *Handle) EnsureNeigh(dev string, ip netip.Addr, mac net.HardwareAddr) error {
	return h.setNeigh(dev, ip, mac, netlink.NUD_PERMANENT)
}

// DeleteNeigh removes the neighbour entry of ip on dev. It returns nil when
// there is no such entry or interface.
func (h *Handle) DeleteNeigh(dev string, ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("delete neighbour on %q: invalid address", dev)
	}
	err := h.withLinkIndex(dev, func(idx int) error {
		return h.nlh.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: family(ip), IP: toIP(ip)})
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete neighbour %s on %q in %s: %w", ip, dev, h.where(), classify(err))
	}
	return nil
}

// Neighs returns the IPv4 and IPv6 neighbour entries of dev.
func (h *Handle) Neighs(dev string) ([]Neigh, error) {
	list, err := h.NeighDetails(dev)
	if err != nil {
		return nil, err
	}
	out := make([]Neigh, len(list))
	for i, n := range list {
		out[i] = n.Neigh
	}
	return out, nil
}

// EnsureFDB makes the VXLAN device dev send frames for mac to the remote
// VTEP dst, with a permanent entry (`bridge fdb replace MAC dev DEV dst DST
// self permanent`). An entry for mac with another destination is changed.
func (h *Handle) EnsureFDB(dev string, mac net.HardwareAddr, dst netip.Addr) error {
	if !dst.IsValid() || len(mac) == 0 {
		return fmt.Errorf("ensure fdb entry on %q: need a MAC and a destination (got %q, %v)", dev, mac, dst)
	}
	err := h.withLinkIndex(dev, func(idx int) error {
		return h.nlh.NeighSet(fdbNeigh(idx, mac, dst))
	})
	if err != nil {
		return fmt.Errorf("ensure fdb entry %s dst %s on %q in %s: %w", mac, dst, dev, h.where(), classify(err))
	}
	return nil
}

// DeleteFDB removes the FDB entry mac -> dst of dev (any destination when
// dst is the zero Addr). It returns nil when there is no such entry or
// interface.
func (h *Handle) DeleteFDB(dev string, mac net.HardwareAddr, dst netip.Addr) error {
	if len(mac) == 0 {
		return fmt.Errorf("delete fdb entry on %q: empty MAC", dev)
	}
	if !dst.IsValid() {
		entries, err := h.FDB(dev)
		if err != nil {
			if isNotFound(err) {
				return nil
			}
			return fmt.Errorf("delete fdb entry %s on %q: %w", mac, dev, err)
		}
		for _, e := range entries {
			if bytes.Equal(e.MAC, mac) {
				if err := h.DeleteFDB(dev, mac, e.Dst); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := h.withLinkIndex(dev, func(idx int) error {
		return h.nlh.NeighDel(fdbNeigh(idx, mac, dst))
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete fdb entry %s dst %v on %q in %s: %w", mac, dst, dev, h.where(), classify(err))
	}
	return nil
}

// FDB returns the forwarding database entries of dev, one per (MAC,
// destination).
func (h *Handle) FDB(dev string) ([]FDBEntry, error) {
	var out []FDBEntry
	err := h.withLinkIndex(dev, func(idx int) error {
		list, err := retryDump(func() ([]netlink.Neigh, error) { return h.nlh.NeighList(idx, unix.AF_BRIDGE) })
		if err != nil {
			return err
		}
		out = out[:0]
		for _, n := range list {
			if n.LinkIndex != idx || len(n.HardwareAddr) == 0 {
				continue
			}
			out = append(out, FDBEntry{
				Dev:       dev,
				MAC:       append(net.HardwareAddr(nil), n.HardwareAddr...),
				Dst:       fromIP(n.IP),
				Permanent: n.State&netlink.NUD_PERMANENT != 0,
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list fdb of %q in %s: %w", dev, h.where(), classify(err))
	}
	return out, nil
}

// fdbNeigh is the netlink form of a VXLAN FDB entry.
func fdbNeigh(idx int, mac net.HardwareAddr, dst netip.Addr) *netlink.Neigh {
	return &netlink.Neigh{
		LinkIndex:    idx,
		Family:       unix.AF_BRIDGE,
		Flags:        netlink.NTF_SELF,
		State:        netlink.NUD_PERMANENT,
		IP:           toIP(dst),
		HardwareAddr: mac,
	}
}

// family returns the netlink address family of a.
func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
