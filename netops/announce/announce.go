// Package announce sends gratuitous ARP for the addresses a node takes
// over (an egress gateway's egress IP, issue 52), with the field's library
// github.com/mdlayher/arp. It is apart from netops because only
// cnibox-agent needs it: cnibox (every CNI call a fresh process) does not
// link it (TestLeanBinary; in cnibox it would cost 65 KB and the inits of
// hash/crc32 and josharian/native at every start).
package announce

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/kerr"
)

// Addr broadcasts a gratuitous ARP for the IPv4 address a on the interface
// link of h's namespace (issue 52's AnnounceAddr): an ARP request, the
// announcement of RFC 5227, whose sender and target address are both a,
// from the link's MAC to the Ethernet broadcast address (its target
// hardware address zero), so that the neighbours (the uplink's router,
// other hosts) that cached the previous holder's MAC for a learn at once
// that it moved here. a need not be on link. The frame goes out on an
// AF_PACKET socket opened in h's namespace. IPv6 is refused (an error
// naming a, wrapping netops.ErrEgressIPv6): its announcement would be an
// unsolicited neighbour advertisement.
func Addr(h *netops.Handle, link string, a netip.Addr) error {
	a, err := kerr.EgressIPv4("announce address", a)
	if err != nil {
		return fmt.Errorf("%w (on %q)", err, link)
	}
	l, err := h.LinkByName(link)
	if err != nil {
		return fmt.Errorf("announce address %s: %w", a, err)
	}
	frame, err := announcement(l.MAC, a)
	if err != nil {
		return fmt.Errorf("announce address %s on %q: %w", a, link, err)
	}
	err = h.Do(func() error {
		c, err := packet.Listen(&net.Interface{Index: l.Index, Name: l.Name, HardwareAddr: l.MAC, MTU: l.MTU}, packet.Raw, unix.ETH_P_ARP, nil)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo(frame, &packet.Addr{HardwareAddr: ethernet.Broadcast})
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
