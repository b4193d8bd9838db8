package ifname

import (
	"crypto/sha256"
	"net/netip"
)

// PodLinkLocal is the IPv6 link-local address of the pod end of a veth
// whose host end is called port: fe80:: and an interface identifier of 64
// bits of sha256 of the name (the universal/local bit cleared: not made
// from a MAC). The veth's creation gives the pod end this address and no
// other (netops' VethIPv6LinkLocal), and the source address check binds it
// to port (netops/nft): both derive it from the name alone, so a DEL that
// knows neither the pod's MAC nor its namespace removes what an ADD bound.
// Host port names are unique on a node, so are the addresses on its
// bridges.
func PodLinkLocal(port string) netip.Addr {
	sum := sha256.Sum256([]byte("cnibox pod link-local\x00" + port))
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	copy(a[8:], sum[:8])
	a[8] &^= 0x02
	return netip.AddrFrom16(a)
}
