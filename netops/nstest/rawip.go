package nstest

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

// What an attacker sends that no socket API would: TCP segments with any
// flags, ICMP messages nobody asked for, on raw IP sockets (the kernel
// writes the IP header), and a raw listener that sees what a namespace's
// stack is handed after its input hook, for the tests of what the policy
// table drops (docs/policy.md).

// The TCP flags of a segment.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPPsh = 0x08
	TCPAck = 0x10
	TCPUrg = 0x20
)

// The IP protocol numbers of the raw sockets.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// RawPacket is one IP packet as a raw socket sends or receives it: its
// addresses, protocol, and everything after the IP header.
type RawPacket struct {
	Src, Dst netip.Addr
	Proto    int
	Data     []byte
}

// TCPSegment is a TCP header (20 bytes, sequence number 1, window 512)
// with flags and payload, from src:sport to dst:dport, its checksum
// computed.
func TCPSegment(src, dst netip.Addr, sport, dport uint16, flags byte, payload []byte) RawPacket {
	b := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 1)
	b[12] = 5 << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 512)
	b = append(b, payload...)
	binary.BigEndian.PutUint16(b[16:], checksum(pseudoHeader(src, dst, ProtoTCP, len(b)), b))
	return RawPacket{Src: src, Dst: dst, Proto: ProtoTCP, Data: b}
}

// ICMPEcho is an ICMP (ICMPv6 for IPv6 addresses) echo request, or reply,
// with id, sequence number and data, its checksum computed.
func ICMPEcho(src, dst netip.Addr, reply bool, id, seq uint16, data []byte) RawPacket {
	typ, proto := byte(8), ProtoICMP
	if reply {
		typ = 0
	}
	if src.Is6() {
		typ, proto = 128, ProtoICMPv6
		if reply {
			typ = 129
		}
	}
	return icmp(src, dst, proto, typ, 0, binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, id), seq), data)
}

// ICMPUnreachable is an ICMP destination unreachable (port unreachable,
// code 3; ICMPv6 type 1 code 4) from src to dst about the packet about,
// quoted as a router quotes it: its IP header and its first bytes.
func ICMPUnreachable(src, dst netip.Addr, about RawPacket) RawPacket {
	quote := append(ipHeader(about), about.Data[:min(len(about.Data), 8)]...)
	if src.Is6() {
		return icmp(src, dst, ProtoICMPv6, 1, 4, make([]byte, 4), quote)
	}
	return icmp(src, dst, ProtoICMP, 3, 3, make([]byte, 4), quote)
}

// icmp is an ICMP or ICMPv6 message of type and code with the 4 bytes
// rest after its checksum, then data.
func icmp(src, dst netip.Addr, proto int, typ, code byte, rest, data []byte) RawPacket {
	b := append(append([]byte{typ, code, 0, 0}, rest...), data...)
	var pseudo []byte
	if proto == ProtoICMPv6 {
		pseudo = pseudoHeader(src, dst, proto, len(b))
	}
	binary.BigEndian.PutUint16(b[2:], checksum(pseudo, b))
	return RawPacket{Src: src, Dst: dst, Proto: proto, Data: b}
}

// ipHeader is the IP header p would be sent with (TTL 64, no options):
// what an ICMP error quotes.
func ipHeader(p RawPacket) []byte {
	if p.Src.Is6() {
		h := make([]byte, 40)
		h[0] = 6 << 4
		binary.BigEndian.PutUint16(h[4:], uint16(len(p.Data)))
		h[6], h[7] = byte(p.Proto), 64
		s, d := p.Src.As16(), p.Dst.As16()
		copy(h[8:], s[:])
		copy(h[24:], d[:])
		return h
	}
	h := make([]byte, 20)
	h[0] = 4<<4 | 5
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(p.Data)))
	h[8], h[9] = 64, byte(p.Proto)
	s, d := p.Src.As4(), p.Dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], checksum(nil, h))
	return h
}

// pseudoHeader is the part of the IP header a transport checksum covers.
func pseudoHeader(src, dst netip.Addr, proto, n int) []byte {
	b := append(src.AsSlice(), dst.AsSlice()...)
	if src.Is6() {
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		return append(b, 0, 0, 0, byte(proto))
	}
	return binary.BigEndian.AppendUint16(append(b, 0, byte(proto)), uint16(n))
}

// checksum is the Internet checksum of pseudo followed by b.
func checksum(pseudo, b []byte) uint16 {
	var sum uint32
	for _, part := range [][]byte{pseudo, b} {
		for i := 0; i+1 < len(part); i += 2 {
			sum += uint32(part[i])<<8 | uint32(part[i+1])
		}
		if len(part)%2 == 1 {
			sum += uint32(part[len(part)-1]) << 8
		}
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// rawNetwork is the net package's name of a raw socket of proto.
func rawNetwork(v6 bool, proto int) string {
	if v6 {
		return fmt.Sprintf("ip6:%d", proto)
	}
	return fmt.Sprintf("ip4:%d", proto)
}

// SendRaw sends p from the namespace at nsPath on a raw socket bound to
// p.Src (an address the namespace has).
func SendRaw(t testing.TB, nsPath string, p RawPacket) error {
	t.Helper()
	c, err := rawSender(t, nsPath, p)
	if err != nil {
		return err
	}
	defer c.Close()
	return writeRaw(c, p)
}

// rawSender is a raw socket of p's protocol bound to p.Src in the
// namespace at nsPath.
func rawSender(t testing.TB, nsPath string, p RawPacket) (*net.IPConn, error) {
	t.Helper()
	var c *net.IPConn
	if err := Run(t, nsPath, func() error {
		var err error
		c, err = net.ListenIP(rawNetwork(p.Src.Is6(), p.Proto), &net.IPAddr{IP: p.Src.AsSlice()})
		return err
	}); err != nil {
		return nil, fmt.Errorf("raw socket from %s in %s: %w", p.Src, nsPath, err)
	}
	return c, nil
}

func writeRaw(c *net.IPConn, p RawPacket) error {
	if _, err := c.WriteToIP(p.Data, &net.IPAddr{IP: p.Dst.AsSlice()}); err != nil {
		return fmt.Errorf("send %d bytes of protocol %d from %s to %s: %w", len(p.Data), p.Proto, p.Src, p.Dst, err)
	}
	return nil
}

// RawListener gets every packet of one protocol and family that the stack
// of its namespace takes in (a raw socket: after the namespace's input
// hook, whether a socket wants it or not). It keeps them all, so that a
// packet that should not have come is never lost among others.
type RawListener struct {
	in *inbox[RawPacket]
}

// ListenRaw starts a RawListener for proto (IPv6 with v6) in the
// namespace at nsPath; it stops when the test ends.
func ListenRaw(t testing.TB, nsPath string, proto int, v6 bool) *RawListener {
	t.Helper()
	c := listenIn(t, nsPath, func() (*net.IPConn, error) { return net.ListenIP(rawNetwork(v6, proto), nil) })
	l := &RawListener{in: newInbox[RawPacket]()}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromIP(buf) // the IPv4 header taken off
			if err != nil {
				return
			}
			src, _ := netip.AddrFromSlice(from.IP)
			l.in.add(RawPacket{Src: src.Unmap(), Proto: proto, Data: append([]byte(nil), buf[:n]...)})
		}
	}()
	return l
}

// Seen waits up to wait for a packet that match accepts, among those the
// listener got since it started, and reports whether one came.
func (l *RawListener) Seen(match func(RawPacket) bool, wait time.Duration) bool {
	return l.in.seen(0, match, wait)
}

// Gets sends p from the namespace at nsPath every 100 ms until the
// listener has got it since the call (the same message from p.Src:
// SameMessage) or wait has passed, and reports whether it has. A failure to send fails the test
// (Error: Gets may run on another goroutine of it).
func (l *RawListener) Gets(t testing.TB, nsPath string, p RawPacket, wait time.Duration) bool {
	t.Helper()
	c, err := rawSender(t, nsPath, p)
	if err != nil {
		t.Error(err)
		return false
	}
	defer c.Close()
	since := l.in.len()
	deadline := time.Now().Add(wait)
	for {
		if err := writeRaw(c, p); err != nil {
			t.Error(err)
			return false
		}
		left := time.Until(deadline)
		if l.in.seen(since, func(got RawPacket) bool { return SameMessage(got, p) }, min(left, 100*time.Millisecond)) {
			return true
		}
		if left <= 100*time.Millisecond {
			return false
		}
	}
}

// SameMessage reports whether got is sent's message from sent's source
// (their checksums aside: the kernel writes an ICMPv6 checksum itself).
func SameMessage(got, sent RawPacket) bool {
	if got.Src != sent.Src || got.Proto != sent.Proto || len(got.Data) != len(sent.Data) {
		return false
	}
	sum := 2 // ICMP, ICMPv6
	if sent.Proto == ProtoTCP {
		sum = 16
	}
	for i := range got.Data {
		if (i < sum || i > sum+1) && got.Data[i] != sent.Data[i] {
			return false
		}
	}
	return true
}
