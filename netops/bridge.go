package netops

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// BridgeOpts describes a bridge for EnsureBridge.
type BridgeOpts struct {
	Name          string
	MTU           int              // at creation; 0 = kernel default
	MAC           net.HardwareAddr // at creation; default a random one, kept (see EnsureBridge)
	PromiscMode   bool             // turn promiscuous mode on
	VlanFiltering bool             // turn vlan_filtering on
}

// EnsureBridge makes sure the bridge o.Name exists and is up, creating it
// when missing. On an existing bridge it turns promiscuous mode and
// vlan_filtering on when asked (it never turns them off, and leaves MTU and
// MAC alone). When a link that is not a bridge has the name, the error wraps
// ErrExists.
//
// A new bridge always gets its MAC at creation (o.MAC, else a random
// locally administered one), which the kernel then keeps: a bridge whose
// MAC was never given takes the lowest MAC among its ports and changes it
// as ports come and go, and every neighbour that cached the old one loses
// the bridge's address until its ARP entry is probed again (tens of
// seconds). The reference bridge plugin sets the MAC to itself for the same
// reason.
func (h *Handle) EnsureBridge(o BridgeOpts) (Link, error) {
	if err := checkIfName("ensure bridge", o.Name); err != nil {
		return Link{}, err
	}
	l, err := h.LinkByName(o.Name)
	switch {
	case err == nil:
		return h.fixBridge(l, o)
	case !errors.Is(err, ErrNotFound):
		return Link{}, fmt.Errorf("ensure bridge %q: %w", o.Name, err)
	}

	// Created down, and brought up by fixBridge once it has its link-local
	// address (addLinkLocal).
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	if o.PromiscMode {
		msg.Change |= unix.IFF_PROMISC
		msg.Flags |= unix.IFF_PROMISC
	}
	attrs := []nl.NetlinkRequestData{nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(o.Name))}
	if o.MTU > 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_MTU, u32(o.MTU)))
	}
	mac := o.MAC
	if len(mac) == 0 {
		mac = RandomMAC()
	}
	attrs = append(attrs, nl.NewRtAttr(unix.IFLA_ADDRESS, []byte(mac)))
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
	if o.VlanFiltering {
		data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
		data.AddRtAttr(nl.IFLA_BR_VLAN_FILTERING, nl.Uint8Attr(1))
	}
	attrs = append(attrs, info)

	l, echoed, err := h.createLink(msg, attrs...)
	switch {
	case errors.Is(err, unix.EEXIST):
		// Created concurrently by someone else.
		if l, err = h.LinkByName(o.Name); err != nil {
			return Link{}, fmt.Errorf("ensure bridge %q: %w", o.Name, err)
		}
		return h.fixBridge(l, o)
	case err != nil:
		return Link{}, fmt.Errorf("create bridge %q in %s: %w", o.Name, h.where(), classify(err))
	case !echoed:
		if l, err = h.LinkByName(o.Name); err != nil {
			return Link{}, fmt.Errorf("create bridge %q: %w", o.Name, err)
		}
	}
	return h.fixBridge(l, o)
}

// addLinkLocal gives a bridge that is not up yet its IPv6 link-local
// address (EUI-64 of its MAC, the one the kernel would make) without DAD.
// The kernel makes its own when the first port brings the carrier up, and
// keeps it tentative through DAD for 1 to 2 s.
// Until then it sends no neighbour solicitation for a packet it forwards
// onto the bridge (ndisc_send_ns needs a usable link-local source), and
// IPv6 traffic from another node to the first pod of a node failed with
// "no route to host". A kernel or link without IPv6 has nothing to add.
func (h *Handle) addLinkLocal(l Link) error {
	if len(l.MAC) != 6 {
		return nil
	}
	m := l.MAC
	ll := netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
	ipnet, _ := toIPNet(netip.PrefixFrom(ll, 64))
	err := h.nlh.AddrAdd(indexOnly(l.Index), &netlink.Addr{IPNet: ipnet, Flags: unix.IFA_F_NODAD})
	switch {
	case err == nil, errors.Is(err, unix.EEXIST), errors.Is(err, unix.EACCES), errors.Is(err, unix.EAFNOSUPPORT):
		return nil
	}
	return fmt.Errorf("add link-local address %s: %w", ll, classify(err))
}

// fixBridge brings an existing bridge to what o asks.
func (h *Handle) fixBridge(l Link, o BridgeOpts) (Link, error) {
	if l.Kind != "bridge" {
		return Link{}, fmt.Errorf("ensure bridge %q: interface exists in %s and is not a bridge (kind %q): %w",
			o.Name, h.where(), l.Kind, ErrExists)
	}
	if o.VlanFiltering && !l.VlanFiltering {
		info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
		info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
		data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
		data.AddRtAttr(nl.IFLA_BR_VLAN_FILTERING, nl.Uint8Attr(1))
		if err := h.setLink("set vlan_filtering", o.Name, 0, 0, info); err != nil {
			return Link{}, fmt.Errorf("ensure bridge %q: %w", o.Name, err)
		}
		l.VlanFiltering = true
	}
	var change, flags uint32
	if o.PromiscMode && !l.Promisc {
		change, flags = change|unix.IFF_PROMISC, flags|unix.IFF_PROMISC
		l.Promisc = true
	}
	if !l.Up {
		if err := h.addLinkLocal(l); err != nil {
			return Link{}, fmt.Errorf("ensure bridge %q: %w", o.Name, err)
		}
		change, flags = change|unix.IFF_UP, flags|unix.IFF_UP
		l.Up = true
	}
	if change != 0 {
		if err := h.setLink("set up", o.Name, change, flags); err != nil {
			return Link{}, fmt.Errorf("ensure bridge %q: %w", o.Name, err)
		}
	}
	return l, nil
}

// PortVlan is one VLAN of a bridge port.
type PortVlan struct {
	VID      int
	PVID     bool // untagged ingress frames get this VID
	Untagged bool // egress frames leave untagged
}

// PortVlans returns the VLANs of a bridge port.
func (h *Handle) PortVlans(port string) ([]PortVlan, error) {
	idx, _, err := h.linkIndex(port)
	if err != nil {
		return nil, fmt.Errorf("list vlans of %q: %w", port, err)
	}
	all, err := retryDump(h.nlh.BridgeVlanList)
	if err != nil {
		return nil, fmt.Errorf("list vlans of %q in %s: %w", port, h.where(), err)
	}
	var out []PortVlan
	for _, v := range all[int32(idx)] {
		out = append(out, PortVlan{
			VID:      int(v.Vid),
			PVID:     v.Flags&nl.BRIDGE_VLAN_INFO_PVID != 0,
			Untagged: v.Flags&nl.BRIDGE_VLAN_INFO_UNTAGGED != 0,
		})
	}
	return out, nil
}
