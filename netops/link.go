package netops

import (
	"errors"
	"fmt"
	"net"

	"github.com/cnibox/cnibox/netops/internal/ifname"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Link describes a network interface.
type Link struct {
	Name        string
	Index       int
	Kind        string // "veth", "bridge", ...; "" for a device without link info (e.g. lo)
	MAC         net.HardwareAddr
	MTU         int
	MasterIndex int  // ifindex of the bridge (or other master) it is enslaved to; 0 = none
	Up          bool // administratively up (IFF_UP)
	PeerIndex   int  // veth only: the peer's ifindex, in the peer's namespace, when known
	Promisc     bool // promiscuous mode requested on the device (IFF_PROMISC)
	Hairpin     bool // bridge port only: hairpin mode

	VlanFiltering bool // bridge only: vlan_filtering enabled
}

// checkIfName reports a usable error when name cannot be an interface name.
func checkIfName(what, name string) error { return ifname.Check(what, name) }

// LinkByName returns the interface called name. The error wraps ErrNotFound
// when there is none.
func (h *Handle) LinkByName(name string) (Link, error) {
	l, _, err := h.linkOf("get link", name)
	return l, err
}

// linkOf is getLink for a name that comes from a caller: it is checked
// first, and what names the operation in that error.
func (h *Handle) linkOf(what, name string) (Link, []byte, error) {
	if err := checkIfName(what, name); err != nil {
		return Link{}, nil, err
	}
	return h.getLink(name)
}

// indexOnly returns a netlink.Link that names a link by its index alone, so
// the netlink package does not look it up by name.
func indexOnly(idx int) netlink.Link {
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: idx}}
}

// getLink asks for the interface called name with one RTM_GETLINK and
// returns it, with the payload of the kernel's RTM_NEWLINK answer for
// attributes Link does not carry. The error wraps ErrNotFound when there is
// none.
func (h *Handle) getLink(name string) (Link, []byte, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	msgs, err := h.rtExec(req, unix.RTM_NEWLINK)
	if err == nil && len(msgs) == 0 {
		err = unix.ENODEV
	}
	if err != nil {
		return Link{}, nil, fmt.Errorf("get link %q in %s: %w", name, h.where(), classify(err))
	}
	l, err := parseLink(msgs[0])
	if err != nil {
		return Link{}, nil, fmt.Errorf("get link %q in %s: %w", name, h.where(), err)
	}
	h.remember(l)
	return l, msgs[0], nil
}

// Links returns all interfaces of the namespace.
func (h *Handle) Links() ([]Link, error) {
	links, err := retryDump(func() ([]Link, error) {
		req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		msgs, err := h.rtExec(req, unix.RTM_NEWLINK)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, err
		}
		links := make([]Link, 0, len(msgs))
		for _, m := range msgs {
			l, perr := parseLink(m)
			if perr != nil {
				return nil, perr
			}
			links = append(links, l)
		}
		return links, err
	})
	if err != nil {
		return nil, fmt.Errorf("list links in %s: %w", h.where(), err)
	}
	for _, l := range links {
		h.remember(l)
	}
	return links, nil
}

// DeleteLink deletes the interface called name (deleting a veth deletes its
// peer too). It returns nil when there is no such interface.
func (h *Handle) DeleteLink(name string) error {
	if err := checkIfName("delete link", name); err != nil {
		return err
	}
	delete(h.ifindex, name)
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	if _, err := h.rtExec(req, 0); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete link %q in %s: %w", name, h.where(), classify(err))
	}
	return nil
}

// SetLinkUp sets the interface administratively up.
func (h *Handle) SetLinkUp(name string) error {
	return h.setLink("set link up", name, unix.IFF_UP, unix.IFF_UP)
}

// SetLinkDown sets the interface administratively down.
func (h *Handle) SetLinkDown(name string) error {
	return h.setLink("set link down", name, unix.IFF_UP, 0)
}

// SetMTU sets the interface's MTU.
func (h *Handle) SetMTU(name string, mtu int) error {
	if mtu <= 0 {
		return fmt.Errorf("set mtu of %q: invalid mtu %d", name, mtu)
	}
	return h.setLink(fmt.Sprintf("set mtu %d", mtu), name, 0, 0,
		nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(mtu))))
}

// SetMAC sets the interface's hardware address.
func (h *Handle) SetMAC(name string, mac net.HardwareAddr) error {
	if len(mac) == 0 {
		return fmt.Errorf("set mac of %q: empty hardware address", name)
	}
	return h.setLink(fmt.Sprintf("set mac %s", mac), name, 0, 0,
		nl.NewRtAttr(unix.IFLA_ADDRESS, []byte(mac)))
}

// SetPromisc turns promiscuous mode of the interface on or off.
func (h *Handle) SetPromisc(name string, on bool) error {
	var flags uint32
	if on {
		flags = unix.IFF_PROMISC
	}
	return h.setLink(fmt.Sprintf("set promisc %v", on), name, unix.IFF_PROMISC, flags)
}

// setLink changes the interface called name with one RTM_NEWLINK addressed
// by name (index 0), so no lookup of its index is needed.
func (h *Handle) setLink(what, name string, change, flags uint32, attrs ...*nl.RtAttr) error {
	if err := checkIfName(what, name); err != nil {
		return err
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Change, msg.Flags = change, flags
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	for _, a := range attrs {
		req.AddData(a)
	}
	if _, err := h.rtExec(req, 0); err != nil {
		return fmt.Errorf("%s of %q in %s: %w", what, name, h.where(), classify(err))
	}
	return nil
}

// remember caches the index of a link, so that later calls naming it need no
// lookup.
func (h *Handle) remember(l Link) {
	if l.Name == "" || l.Index == 0 {
		return
	}
	if h.ifindex == nil {
		h.ifindex = make(map[string]int)
	}
	h.ifindex[l.Name] = l.Index
}

// linkIndex returns the index of the interface called name, from the cache
// or the kernel, and whether it came from the cache.
func (h *Handle) linkIndex(name string) (int, bool, error) {
	if idx, ok := h.ifindex[name]; ok {
		return idx, true, nil
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return 0, false, err
	}
	return l.Index, false, nil
}

// withLinkIndex runs fn with the index of the interface called name. When a
// cached index turns out stale (ENODEV), it looks the name up again and
// retries once.
func (h *Handle) withLinkIndex(name string, fn func(idx int) error) error {
	idx, cached, err := h.linkIndex(name)
	if err != nil {
		return err
	}
	err = fn(idx)
	if err != nil && cached && errors.Is(err, unix.ENODEV) {
		delete(h.ifindex, name)
		if idx, _, err = h.linkIndex(name); err != nil {
			return err
		}
		err = fn(idx)
	}
	return err
}

// parseLink decodes an RTM_NEWLINK message.
func parseLink(m []byte) (Link, error) {
	if len(m) < unix.SizeofIfInfomsg {
		return Link{}, fmt.Errorf("short RTM_NEWLINK message (%d bytes)", len(m))
	}
	msg := nl.DeserializeIfInfomsg(m)
	l := Link{
		Index:   int(msg.Index),
		Up:      msg.Flags&unix.IFF_UP != 0,
		Promisc: msg.Flags&unix.IFF_PROMISC != 0,
	}
	var iflink int
	var info []byte
	err := eachAttr(m[unix.SizeofIfInfomsg:], func(typ uint16, v []byte) {
		switch typ {
		case unix.IFLA_IFNAME:
			l.Name = unix.ByteSliceToString(v)
		case unix.IFLA_ADDRESS:
			l.MAC = net.HardwareAddr(append([]byte(nil), v...))
		case unix.IFLA_MTU:
			l.MTU = attrInt(v, l.MTU)
		case unix.IFLA_MASTER:
			l.MasterIndex = attrInt(v, l.MasterIndex)
		case unix.IFLA_LINK:
			iflink = attrInt(v, iflink)
		case unix.IFLA_LINKINFO:
			info = v
		}
	})
	if err != nil {
		return Link{}, fmt.Errorf("parse RTM_NEWLINK: %w", err)
	}
	if err := parseLinkInfo(&l, info); err != nil {
		return Link{}, err
	}
	if l.Kind == "veth" {
		l.PeerIndex = iflink
	}
	return l, nil
}

// parseLinkInfo decodes the IFLA_LINKINFO attributes Link reports: the kind,
// a bridge's vlan_filtering and a bridge port's hairpin mode.
func parseLinkInfo(l *Link, b []byte) error {
	var slaveKind string
	var data, slaveData []byte
	err := eachAttr(b, func(typ uint16, v []byte) {
		switch typ {
		case nl.IFLA_INFO_KIND:
			l.Kind = unix.ByteSliceToString(v)
		case nl.IFLA_INFO_SLAVE_KIND:
			slaveKind = unix.ByteSliceToString(v)
		case nl.IFLA_INFO_DATA:
			data = v
		case nl.IFLA_INFO_SLAVE_DATA:
			slaveData = v
		}
	})
	if err != nil {
		return fmt.Errorf("parse IFLA_LINKINFO: %w", err)
	}
	if l.Kind == "bridge" {
		if l.VlanFiltering, err = flagAttr(data, nl.IFLA_BR_VLAN_FILTERING); err != nil {
			return err
		}
	}
	if slaveKind == "bridge" {
		if l.Hairpin, err = flagAttr(slaveData, nl.IFLA_BRPORT_MODE); err != nil {
			return err
		}
	}
	return nil
}

// eachAttr calls f with the type (the nested and byte-order flags masked
// off) and the value of each rtnetlink attribute in b, in order.
func eachAttr(b []byte, f func(typ uint16, v []byte)) error {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return err
	}
	for _, a := range attrs {
		f(a.Attr.Type&nlaTypeMask, a.Value)
	}
	return nil
}

// attrOf returns the value of the last attribute of type typ in the
// rtnetlink attributes in b; nil when there is none.
func attrOf(b []byte, typ uint16) ([]byte, error) {
	var out []byte
	err := eachAttr(b, func(t uint16, v []byte) {
		if t == typ {
			out = v
		}
	})
	return out, err
}

// flagAttr reports whether the one-byte attribute typ of the link info
// data in b is set; false when there is none.
func flagAttr(b []byte, typ uint16) (bool, error) {
	v, err := attrOf(b, typ)
	if err != nil {
		return false, fmt.Errorf("parse link info data: %w", err)
	}
	return len(v) >= 1 && v[0] != 0, nil
}

// attrInt decodes a u32 attribute value; a short one leaves old.
func attrInt(v []byte, old int) int {
	if len(v) < 4 {
		return old
	}
	return int(nl.NativeEndian().Uint32(v))
}
