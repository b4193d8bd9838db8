package bridge

import (
	"crypto/sha256"
	"net"

	"github.com/cnibox/cnibox/roles/internal/attach"
)

// vethPrefix starts every host veth name the bridge role creates; GC relies
// on it to tell our ports from others on a shared bridge.
const vethPrefix = attach.VethPrefix

// hostVethName is the deterministic host end name of an attachment, so that
// DEL and GC need no lookup: "cbx" + 12 hex digits of sha256(cid, ifname).
func hostVethName(containerID, ifname string) string {
	return attach.VethName(vethPrefix, containerID, ifname)
}

// isOurVeth reports whether a link name has the shape of our host veths.
func isOurVeth(name string) bool { return attach.IsVethName(vethPrefix, name) }

// HostVethName is the host end name of an attachment with c's prefix
// ("cbx", or the one of the role's Hooks).
func (c *Conf) HostVethName(containerID, ifname string) string {
	return attach.VethName(c.vethPrefix(), containerID, ifname)
}

// IsHostVeth reports whether a link name has the shape of c's host veths.
func (c *Conf) IsHostVeth(name string) bool { return attach.IsVethName(c.vethPrefix(), name) }

func (c *Conf) vethPrefix() string {
	if c.hooks == nil || c.hooks.VethPrefix == "" {
		return vethPrefix
	}
	return c.hooks.VethPrefix
}

// bridgeMAC is the fixed MAC a bridge we create gets: without one the kernel
// gives the bridge the lowest MAC of its ports and changes it when that port
// leaves, and every pod keeps sending to the old gateway MAC until its
// neighbour entry expires. Locally administered, unicast, from the name.
func bridgeMAC(name string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("cnibox-bridge\x00" + name))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&0xfe | 0x02
	return mac
}
