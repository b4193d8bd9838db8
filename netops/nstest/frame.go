package nstest

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// Whole frames, every header written by the test, for what no socket of
// the IP layer sends: fragments, IP options and extension headers, wrong
// checksums and lengths, forged ARP (the escape suite, docs/policy.md).
// SendFrames puts them on a link as they are; CaptureFrames sees what a
// link receives.

// The Ethernet types of the frames.
const (
	EtherIPv4 = 0x0800
	EtherARP  = 0x0806
	EtherIPv6 = 0x86dd
)

// The IPv6 extension headers (next header values) IPv6Packet writes.
const (
	ExtHopByHop = 0
	ExtRouting  = 43
	ExtFragment = 44
	ExtDestOpts = 60
)

// EtherFrame is an Ethernet frame from src to dst of type typ with
// payload.
func EtherFrame(dst, src net.HardwareAddr, typ uint16, payload []byte) []byte {
	f := make([]byte, 0, 14+len(payload))
	f = append(append(f, dst[:6]...), src[:6]...)
	f = binary.BigEndian.AppendUint16(f, typ)
	return append(f, payload...)
}

// IPv4Packet is an IPv4 packet to write: its header (TTL 64 unless set,
// Options a multiple of 4 bytes long) and payload.
type IPv4Packet struct {
	Src, Dst netip.Addr
	Proto    byte
	ID       uint16
	TTL      byte
	Offset   uint16 // the fragment offset, in 8-byte units
	More     bool   // more fragments follow
	Options  []byte
	Payload  []byte
}

// Bytes is p as sent, its header checksum computed.
func (p IPv4Packet) Bytes() []byte {
	hl := 20 + len(p.Options)
	b := make([]byte, hl, hl+len(p.Payload))
	b[0] = 4<<4 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hl+len(p.Payload)))
	binary.BigEndian.PutUint16(b[4:], p.ID)
	frag := p.Offset & 0x1fff
	if p.More {
		frag |= 0x2000
	}
	binary.BigEndian.PutUint16(b[6:], frag)
	b[8], b[9] = p.TTL, p.Proto
	if b[8] == 0 {
		b[8] = 64
	}
	s, d := p.Src.As4(), p.Dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	copy(b[20:], p.Options)
	binary.BigEndian.PutUint16(b[10:], checksum(nil, b[:hl]))
	return append(b, p.Payload...)
}

// IPv6Ext is an extension header of an IPv6 packet: its type and its
// bytes after the next header field (and, but for a fragment header, the
// length field), so that the whole header is a multiple of 8 bytes long.
type IPv6Ext struct {
	Type byte
	Body []byte
}

// PadOptions is an option area of n bytes (a hop-by-hop or destination
// options header's body: n = 6 + 8k) of one PadN option.
func PadOptions(n int) []byte {
	b := make([]byte, n)
	b[0], b[1] = 1, byte(n-2)
	return b
}

// RoutingType0 is the body of a routing header of type 0 (deprecated:
// RFC 5095) with segments left set, through addrs.
func RoutingType0(segmentsLeft byte, addrs ...netip.Addr) IPv6Ext {
	b := []byte{0, segmentsLeft, 0, 0, 0, 0}
	for _, a := range addrs {
		a16 := a.As16()
		b = append(b, a16[:]...)
	}
	return IPv6Ext{Type: ExtRouting, Body: b}
}

// FragmentHeader is a fragment header: offset in 8-byte units, whether
// more follow, and the packet's identification.
func FragmentHeader(offset uint16, more bool, id uint32) IPv6Ext {
	b := make([]byte, 6)
	v := offset << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(b[0:], v)
	binary.BigEndian.PutUint32(b[2:], id)
	return IPv6Ext{Type: ExtFragment, Body: b}
}

// IPv6Packet is an IPv6 packet to write: its header (hop limit 64 unless
// set), its extension headers in order, the protocol after them and the
// payload.
type IPv6Packet struct {
	Src, Dst  netip.Addr
	FlowLabel uint32
	HopLimit  byte
	Ext       []IPv6Ext
	Proto     byte
	Payload   []byte
}

// Bytes is p as sent.
func (p IPv6Packet) Bytes() []byte {
	b := make([]byte, 40, 40+len(p.Payload)+8*len(p.Ext))
	binary.BigEndian.PutUint32(b[0:], 6<<28|p.FlowLabel&0xfffff)
	b[7] = p.HopLimit
	if b[7] == 0 {
		b[7] = 64
	}
	s, d := p.Src.As16(), p.Dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	next := &b[6]
	for _, e := range p.Ext {
		*next = e.Type
		at := len(b)
		if e.Type == ExtFragment {
			b = append(b, 0, 0)
		} else {
			b = append(b, 0, byte((2+len(e.Body))/8-1))
		}
		b = append(b, e.Body...)
		next = &b[at]
	}
	*next = p.Proto
	b = append(b, p.Payload...)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	return b
}

// UDPDatagram is a UDP datagram from src:sport to dst:dport with payload,
// its checksum computed.
func UDPDatagram(src, dst netip.Addr, sport, dport uint16, payload []byte) RawPacket {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	b = append(b, payload...)
	sum := checksum(pseudoHeader(src, dst, ProtoUDP, len(b)), b)
	if sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(b[6:], sum)
	return RawPacket{Src: src, Dst: dst, Proto: ProtoUDP, Data: b}
}

// ICMPMessage is an ICMP message (ICMPv6 for IPv6 addresses) of type and
// code, the 4 bytes after its checksum rest, then data; its checksum
// computed.
func ICMPMessage(src, dst netip.Addr, typ, code byte, rest, data []byte) RawPacket {
	proto := ProtoICMP
	if src.Is6() {
		proto = ProtoICMPv6
	}
	return icmp(src, dst, proto, typ, code, rest, data)
}

// TransportChecksum is the checksum of the transport b of proto from src
// to dst (its checksum field zero): what a test that writes a transport
// header of its own puts in it.
func TransportChecksum(src, dst netip.Addr, proto int, b []byte) uint16 {
	return checksum(pseudoHeader(src, dst, proto, len(b)), b)
}

// HeaderChecksum is the checksum of an IPv4 header h (its checksum field
// zero).
func HeaderChecksum(h []byte) uint16 { return checksum(nil, h) }

// ARPMessage is an ARP message over Ethernet for IPv4 (op 1 a request, 2 a
// reply): the sender's and the target's hardware and IP addresses.
func ARPMessage(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := []byte{0, 1, 0x08, 0x00, 6, 4}
	b = binary.BigEndian.AppendUint16(b, op)
	s4, t4 := spa.As4(), tpa.As4()
	if tha == nil {
		tha = make(net.HardwareAddr, 6)
	}
	b = append(append(b, sha[:6]...), s4[:]...)
	return append(append(b, tha[:6]...), t4[:]...)
}
