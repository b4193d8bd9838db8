package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
)

// vethPrefix starts every host veth name cnibox creates; GC relies on it to
// tell our ports from others on a shared bridge.
const vethPrefix = "cbx"

// hostVethName is the deterministic host end name of an attachment, so that
// DEL and GC need no lookup: "cbx" + 12 hex digits of sha256(cid, ifname).
func hostVethName(containerID, ifname string) string {
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return vethPrefix + hex.EncodeToString(sum[:6])
}

// isOurVeth reports whether a link name has the shape of our host veths.
func isOurVeth(name string) bool {
	return len(name) == len(vethPrefix)+12 && strings.HasPrefix(name, vethPrefix)
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

// prefixOf converts a result address to netip form.
func prefixOf(n net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	a = a.Unmap()
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones)
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func ipNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
