package nstest

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Prober asks a LAN who answers for an address: the MACs that answer one
// request within window (more than one: two hosts claim it).
type Prober interface {
	Answers(target netip.Addr, window time.Duration) ([]string, error)
}

// NDPProber asks a LAN, from an interface of a namespace, who answers
// neighbour solicitations for an IPv6 address: the LAN's view of who
// holds it. It speaks Ethernet frames on an AF_PACKET socket (as
// ARPProber does): an ICMPv6 socket would name its interface by a zone,
// which Go resolves in whatever namespace its process-wide cache was
// filled.
type NDPProber struct {
	c   *packet.Conn
	mac net.HardwareAddr
	src netip.Addr // the interface's link-local address
}

// NewNDPProber opens a packet socket on ifname in the namespace at nsPath
// and waits (up to 10 s) for the interface's link-local address to be
// usable (its duplicate address detection over); closed when the test
// ends.
func NewNDPProber(t testing.TB, nsPath, ifname string) *NDPProber {
	t.Helper()
	nh := Netlink(t, nsPath)
	p := &NDPProber{}
	for deadline := time.Now().Add(10 * time.Second); !p.src.IsValid() && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		l, err := nh.LinkByName(ifname)
		if err != nil {
			continue
		}
		as, _ := nh.AddrList(l, netlink.FAMILY_V6)
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				p.src = ip.Unmap()
			}
		}
	}
	if !p.src.IsValid() {
		t.Fatalf("%s in %s: no usable link-local address after 10 s", ifname, nsPath)
	}
	err := Run(t, nsPath, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		p.mac = ifi.HardwareAddr
		p.c, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_IPV6, nil)
		return err
	})
	if err != nil {
		t.Fatalf("packet socket on %s in %s: %v", ifname, nsPath, err)
	}
	t.Cleanup(func() { p.c.Close() })
	return p
}

// Answers sends one neighbour solicitation for target (to its
// solicited-node multicast group) and returns the target link-layer
// addresses of the advertisements for it that come within window.
func (p *NDPProber) Answers(target netip.Addr, window time.Duration) ([]string, error) {
	group, err := ndp.SolicitedNodeMulticast(target)
	if err != nil {
		return nil, err
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: target,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: p.mac}}}
	icmp, err := ndp.MarshalMessageChecksum(ns, p.src, group)
	if err != nil {
		return nil, err
	}
	g := group.As16()
	dst := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	frame, err := (&ethernet.Frame{Destination: dst, Source: p.mac, EtherType: ethernet.EtherTypeIPv6, Payload: ipv6Packet(p.src, group, icmp)}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	if _, err := p.c.WriteTo(frame, &packet.Addr{HardwareAddr: dst}); err != nil {
		return nil, err
	}
	if err := p.c.SetReadDeadline(time.Now().Add(window)); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	buf := make([]byte, 1500)
	for {
		n, _, err := p.c.ReadFrom(buf)
		if err != nil {
			return out, nil // the window is over
		}
		var f ethernet.Frame
		if f.UnmarshalBinary(buf[:n]) != nil || len(f.Payload) < 40 || f.Payload[6] != 58 {
			continue
		}
		m, err := ndp.ParseMessage(f.Payload[40:])
		na, ok := m.(*ndp.NeighborAdvertisement)
		if err != nil || !ok || na.TargetAddress != target {
			continue
		}
		for _, o := range na.Options {
			if l, ok := o.(*ndp.LinkLayerAddress); ok && l.Direction == ndp.Target && !seen[l.Addr.String()] {
				seen[l.Addr.String()] = true
				out = append(out, l.Addr.String())
			}
		}
	}
}

// ipv6Packet is an IPv6 header from src to dst, next header ICMPv6, hop
// limit 255 (neighbour discovery's), followed by icmp.
func ipv6Packet(src, dst netip.Addr, icmp []byte) []byte {
	b := make([]byte, 40, 40+len(icmp))
	b[0] = 6 << 4
	binary.BigEndian.PutUint16(b[4:], uint16(len(icmp)))
	b[6], b[7] = 58, 255
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, icmp...)
}
