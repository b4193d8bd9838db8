package netops

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// SetPortIsolated turns the isolated flag of a bridge port on or off
// (IFLA_BRPORT_ISOLATED, `bridge link set dev PORT isolated on`): an
// isolated port exchanges frames only with the bridge's ports that are not
// isolated (the bridge itself, an uplink), never with another isolated one.
// Setting the flag it already has is no change.
func (h *Handle) SetPortIsolated(port string, on bool) error {
	var v uint8
	if on {
		v = 1
	}
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	data := info.AddRtAttr(nl.IFLA_INFO_SLAVE_DATA, nil)
	data.AddRtAttr(nl.IFLA_BRPORT_ISOLATED, nl.Uint8Attr(v))
	return h.setLink(fmt.Sprintf("set isolated %v", on), port, 0, 0, info)
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
