package netops

import (
	"encoding/binary"
	"math/rand/v2"
	"net"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// createLink sends one RTM_NEWLINK that creates a link (NLM_F_CREATE|
// NLM_F_EXCL) and asks the kernel to echo it back (NLM_F_ECHO), which saves
// looking the new link up. echoed is false when the kernel did not echo
// (kernels before 6.3).
func (h *Handle) createLink(msg *nl.IfInfomsg, attrs ...nl.NetlinkRequestData) (l Link, echoed bool, err error) {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK,
		unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK|unix.NLM_F_ECHO)
	req.AddData(msg)
	for _, a := range attrs {
		req.AddData(a)
	}
	msgs, err := h.rtExec(req, unix.RTM_NEWLINK)
	if err != nil {
		return Link{}, false, err
	}
	if len(msgs) == 0 {
		return Link{}, false, nil
	}
	l, err = parseLink(msgs[len(msgs)-1])
	if err != nil {
		return Link{}, false, err
	}
	h.remember(l)
	return l, true, nil
}

// RandomMAC returns a random unicast, locally administered MAC address, as
// the kernel picks for a new veth. It comes from math/rand/v2 (ChaCha8,
// seeded by the runtime from the kernel's entropy): a MAC has to be unique,
// not secret.
func RandomMAC() net.HardwareAddr {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	mac := net.HardwareAddr(b[:6])
	mac[0] = mac[0]&^0x01 | 0x02
	return mac
}

// u32 encodes v as a native-endian netlink u32 attribute value.
func u32(v int) []byte { return nl.Uint32Attr(uint32(v)) }
