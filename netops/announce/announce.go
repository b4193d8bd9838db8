// Package announce tells the LAN that a node took over an address (an
// egress gateway's egress IP, issue 52; a LoadBalancer Service's address,
// issue 64): a gratuitous ARP for IPv4 (github.com/mdlayher/arp), an
// unsolicited neighbour advertisement for IPv6 (github.com/mdlayher/ndp).
// It is apart from netops because only cnibox-agent needs it: cnibox
// (every CNI call a fresh process) does not link it (TestLeanBinary; in
// cnibox it would cost 65 KB and the inits of hash/crc32 and
// josharian/native at every start).
package announce

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/kerr"
)

// Addr announces the address a on the interface link of h's namespace
// (issue 52's AnnounceAddr), so that the neighbours (the uplink's router,
// other hosts) that cached the previous holder's MAC for a learn at once
// that it moved here:
//
//   - IPv4: a gratuitous ARP, the announcement of RFC 5227: an ARP request
//     whose sender and target address are both a, from the link's MAC to
//     the Ethernet broadcast address (its target hardware address zero);
//   - IPv6: an unsolicited neighbour advertisement (RFC 4861 7.2.6) for a
//     to all nodes (ff02::1), from a, hop limit 255, with the Override
//     flag and the link's MAC as its target link-layer address, which a
//     neighbour that has an entry for a takes at once (Linux, as RFC 4861
//     says, creates none from it: the LAN asks when it next needs a, and
//     the node's kernel answers, a being on the link).
//
// a need not be on link. The frame goes out on an AF_PACKET socket opened
// in h's namespace.
func Addr(h *netops.Handle, link string, a netip.Addr) error {
	a = a.Unmap()
	if !a.Is4() && !a.Is6() {
		return fmt.Errorf("announce address on %q: %v is not an address", link, a)
	}
	l, err := h.LinkByName(link)
	if err != nil {
		return fmt.Errorf("announce address %s: %w", a, err)
	}
	frame, proto, dst := []byte(nil), uint16(unix.ETH_P_ARP), ethernet.Broadcast
	if a.Is4() {
		frame, err = announcement(l.MAC, a)
	} else {
		proto, dst = unix.ETH_P_IPV6, allNodesMAC
		frame, err = advertisement(l.MAC, a)
	}
	if err != nil {
		return fmt.Errorf("announce address %s on %q: %w", a, link, err)
	}
	err = h.Do(func() error {
		c, err := packet.Listen(&net.Interface{Index: l.Index, Name: l.Name, HardwareAddr: l.MAC, MTU: l.MTU}, packet.Raw, int(proto), nil)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo(frame, &packet.Addr{HardwareAddr: dst})
		return err
	})
	if err != nil {
		return fmt.Errorf("announce address %s on %q in %s: %w", a, link, kerr.Where(h.Path()), err)
	}
	return nil
}

// announcement is the Ethernet frame of a's gratuitous ARP from mac.
func announcement(mac net.HardwareAddr, a netip.Addr) ([]byte, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("the link has no Ethernet address (%v)", mac)
	}
	p, err := arp.NewPacket(arp.OperationRequest, mac, a, make(net.HardwareAddr, 6), a)
	if err != nil {
		return nil, err
	}
	pb, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return (&ethernet.Frame{Destination: ethernet.Broadcast, Source: mac, EtherType: ethernet.EtherTypeARP, Payload: pb}).MarshalBinary()
}

// allNodes is IPv6's all-nodes multicast address, allNodesMAC its
// Ethernet group (33:33 and the address's last four bytes).
var (
	allNodes    = netip.MustParseAddr("ff02::1")
	allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
)

// advertisement is the Ethernet frame of a's unsolicited neighbour
// advertisement from mac: IPv6 from a to ff02::1, hop limit 255 (a
// receiver drops any other), ICMPv6 with its checksum.
func advertisement(mac net.HardwareAddr, a netip.Addr) ([]byte, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("the link has no Ethernet address (%v)", mac)
	}
	na := &ndp.NeighborAdvertisement{Override: true, TargetAddress: a,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}}}
	icmp, err := ndp.MarshalMessageChecksum(na, a, allNodes)
	if err != nil {
		return nil, err
	}
	ip := make([]byte, 40, 40+len(icmp))
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:], uint16(len(icmp)))
	ip[6], ip[7] = 58, 255 // ICMPv6, hop limit
	src, dst := a.As16(), allNodes.As16()
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	return (&ethernet.Frame{Destination: allNodesMAC, Source: mac, EtherType: ethernet.EtherTypeIPv6, Payload: append(ip, icmp...)}).MarshalBinary()
}
