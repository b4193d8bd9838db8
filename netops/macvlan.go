package netops

import (
	"bytes"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// namedMode is a device mode and its name, as `ip link` spells it. (Lists,
// not maps: a package-level map is built by code at every start.)
type namedMode[M comparable] struct {
	name string
	mode M
}

// macvlanModes and ipvlanModes are the modes of each kind.
var (
	macvlanModes = []namedMode[uint32]{
		{"private", nl.MACVLAN_MODE_PRIVATE},
		{"vepa", nl.MACVLAN_MODE_VEPA},
		{"bridge", nl.MACVLAN_MODE_BRIDGE},
		{"passthru", nl.MACVLAN_MODE_PASSTHRU},
		{"source", nl.MACVLAN_MODE_SOURCE},
	}
	ipvlanModes = []namedMode[uint16]{{"l2", 0}, {"l3", 1}, {"l3s", 2}}
)

// SubLinkOpts describes a macvlan or ipvlan device on a master (lower)
// interface for EnsureMacvlan and EnsureIpvlan.
type SubLinkOpts struct {
	Name   string // the new device's name, in Into's namespace
	Master string // the lower device, in the Handle's namespace
	// Into is the namespace the device is created in (directly, under its
	// final name); nil means the Handle's own.
	Into *Handle
	Mode string // a name in macvlanModes or ipvlanModes; "" = bridge / l2
	MTU  int    // 0 = the master's
	MAC  net.HardwareAddr
	// BCQueueLen is a macvlan's broadcast queue length; 0 = kernel default.
	BCQueueLen int
}

// SubLink is what EnsureMacvlan and EnsureIpvlan report about a device.
type SubLink struct {
	Link
	Mode string // as in SubLinkOpts
}

// EnsureMacvlan makes sure the macvlan device o describes exists in o.Into.
// A new one is created down, with one RTM_NEWLINK directly in o.Into under
// o.Name; the caller sets it up once its addresses are on (so that
// arp_notify announces them). An existing macvlan of that name in the same
// mode (and with o.MAC, when given) is kept; any other device of that name
// is an error that wraps ErrExists.
func (h *Handle) EnsureMacvlan(o SubLinkOpts) (SubLink, error) {
	mode, err := subLinkModeOf(&o, "macvlan", macvlanModes, "bridge")
	if err != nil {
		return SubLink{}, err
	}
	data := []*nl.RtAttr{nl.NewRtAttr(nl.IFLA_MACVLAN_MODE, nl.Uint32Attr(mode))}
	if o.BCQueueLen > 0 {
		data = append(data, nl.NewRtAttr(nl.IFLA_MACVLAN_BC_QUEUE_LEN, u32(o.BCQueueLen)))
	}
	return h.ensureSubLink("macvlan", o, data)
}

// EnsureIpvlan is EnsureMacvlan for an ipvlan device (modes l2, l3, l3s).
// An ipvlan shares its master's MAC, so o.MAC must be empty.
func (h *Handle) EnsureIpvlan(o SubLinkOpts) (SubLink, error) {
	mode, err := subLinkModeOf(&o, "ipvlan", ipvlanModes, "l2")
	if err != nil {
		return SubLink{}, err
	}
	if len(o.MAC) > 0 {
		return SubLink{}, fmt.Errorf("ensure ipvlan %q: an ipvlan device has its master's MAC", o.Name)
	}
	return h.ensureSubLink("ipvlan", o, []*nl.RtAttr{nl.NewRtAttr(nl.IFLA_IPVLAN_MODE, nl.Uint16Attr(mode))})
}

// subLinkModeOf looks o.Mode up in the modes of kind, "" meaning def (which
// o.Mode is then set to, so that an existing device is compared with it).
func subLinkModeOf[M comparable](o *SubLinkOpts, kind string, modes []namedMode[M], def string) (M, error) {
	if o.Mode == "" {
		o.Mode = def
	}
	for _, m := range modes {
		if m.name == o.Mode {
			return m.mode, nil
		}
	}
	var zero M
	return zero, fmt.Errorf("ensure %s %q: unknown mode %q", kind, o.Name, o.Mode)
}

func (h *Handle) ensureSubLink(kind string, o SubLinkOpts, data []*nl.RtAttr) (SubLink, error) {
	if err := checkIfName("ensure "+kind, o.Name); err != nil {
		return SubLink{}, err
	}
	into := o.Into
	if into == nil {
		into = h
	}
	what := fmt.Sprintf("ensure %s %q on %q (in %s)", kind, o.Name, o.Master, into.where())
	master, err := h.LinkByName(o.Master)
	if err != nil {
		return SubLink{}, fmt.Errorf("%s: master: %w", what, err)
	}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	attrs := []nl.NetlinkRequestData{
		nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(o.Name)),
		nl.NewRtAttr(unix.IFLA_LINK, u32(master.Index)),
	}
	if o.MTU > 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_MTU, u32(o.MTU)))
	}
	if len(o.MAC) > 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_ADDRESS, []byte(o.MAC)))
	}
	if into != h {
		fd, err := into.nsFD()
		if err != nil {
			return SubLink{}, fmt.Errorf("%s: %w", what, err)
		}
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_NET_NS_FD, u32(fd)))
	}
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated(kind))
	d := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	for _, a := range data {
		d.AddChild(a)
	}
	attrs = append(attrs, info)

	// The echo comes from the namespace the request was sent in, which is
	// not where a device created in another one lives: look it up there.
	// addInto goes around kernels that refuse a name the node has.
	err = h.addInto(into, o.Name, func(name string) error {
		attrs[0] = nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name))
		_, _, err := h.createLink(msg, attrs...)
		return err
	})
	if errors.Is(err, unix.EEXIST) {
		l, err := into.SubLinkByName(o.Name)
		if err != nil {
			return SubLink{}, fmt.Errorf("%s: %w", what, err)
		}
		if l.Kind != kind || l.Mode != o.Mode || (len(o.MAC) > 0 && !bytes.Equal(l.MAC, o.MAC)) {
			return SubLink{}, fmt.Errorf("%s: interface %q already exists in %s (kind %q, mode %q): %w", what, o.Name, into.where(), l.Kind, l.Mode, ErrExists)
		}
	} else if err != nil {
		return SubLink{}, fmt.Errorf("%s: %w", what, kindErr(kind, err))
	}
	l, err := into.SubLinkByName(o.Name)
	if err != nil {
		return SubLink{}, fmt.Errorf("%s: %w", what, err)
	}
	return l, nil
}

// SubLinkByName returns the interface called name with its macvlan or
// ipvlan mode ("" for other kinds). The error wraps ErrNotFound when there
// is none.
func (h *Handle) SubLinkByName(name string) (SubLink, error) {
	l, raw, err := h.linkOf("get link", name)
	if err != nil {
		return SubLink{}, err
	}
	s := SubLink{Link: l}
	if l.Kind != "macvlan" && l.Kind != "ipvlan" {
		return s, nil
	}
	info, err := attrOf(raw[unix.SizeofIfInfomsg:], unix.IFLA_LINKINFO)
	if err != nil {
		return SubLink{}, fmt.Errorf("get link %q: parse: %w", name, err)
	}
	data, err := attrOf(info, nl.IFLA_INFO_DATA)
	if err != nil {
		return SubLink{}, fmt.Errorf("get link %q: parse link info: %w", name, err)
	}
	switch native := nl.NativeEndian(); {
	case l.Kind == "macvlan":
		if v, _ := attrOf(data, nl.IFLA_MACVLAN_MODE); len(v) >= 4 {
			s.Mode = modeName(macvlanModes, native.Uint32(v))
		}
	case l.Kind == "ipvlan":
		if v, _ := attrOf(data, nl.IFLA_IPVLAN_MODE); len(v) >= 2 {
			s.Mode = modeName(ipvlanModes, native.Uint16(v))
		}
	}
	return s, nil
}

// modeName is the name of mode m in modes; "" when it has none.
func modeName[M comparable](modes []namedMode[M], m M) string {
	for _, v := range modes {
		if v.mode == m {
			return v.name
		}
	}
	return ""
}
