package netops

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The one-byte flags of a bridge port (IFLA_BRPORT_*, in the port's
// IFLA_INFO_SLAVE_DATA): set with one RTM_NEWLINK, read from RTM_GETLINK.

// SetHairpin turns hairpin mode of a bridge port on or off.
func (h *Handle) SetHairpin(port string, on bool) error {
	return h.setPortFlag("hairpin", port, nl.IFLA_BRPORT_MODE, on)
}

// SetPortIsolated turns the isolated flag of a bridge port on or off
// (IFLA_BRPORT_ISOLATED, `bridge link set dev PORT isolated on`): an
// isolated port exchanges frames only with the bridge's ports that are not
// isolated (the bridge itself, an uplink), never with another isolated one.
// Setting the flag it already has is no change.
func (h *Handle) SetPortIsolated(port string, on bool) error {
	return h.setPortFlag("isolated", port, nl.IFLA_BRPORT_ISOLATED, on)
}

// PortIsolated reports whether the bridge port is isolated; false for a
// link that is no bridge port. The error wraps ErrNotFound when there is
// no such link.
func (h *Handle) PortIsolated(port string) (bool, error) {
	_, m, err := h.linkOf("get isolated", port)
	if err != nil {
		return false, err
	}
	info, err := attrOf(m[unix.SizeofIfInfomsg:], unix.IFLA_LINKINFO)
	if err != nil {
		return false, fmt.Errorf("get isolated of %q: parse RTM_NEWLINK: %w", port, err)
	}
	slave, err := attrOf(info, nl.IFLA_INFO_SLAVE_DATA)
	if err != nil {
		return false, fmt.Errorf("get isolated of %q: parse IFLA_LINKINFO: %w", port, err)
	}
	return flagAttr(slave, nl.IFLA_BRPORT_ISOLATED)
}

// setPortFlag sets the flag attr (called name in errors) of a bridge port.
func (h *Handle) setPortFlag(name, port string, attr int, on bool) error {
	var v uint8
	if on {
		v = 1
	}
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	data := info.AddRtAttr(nl.IFLA_INFO_SLAVE_DATA, nil)
	data.AddRtAttr(attr, nl.Uint8Attr(v))
	return h.setLink(fmt.Sprintf("set %s %v", name, on), port, 0, 0, info)
}
