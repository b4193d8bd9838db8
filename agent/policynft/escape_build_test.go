package policynft_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"net"
	"net/netip"

	"github.com/cnibox/cnibox/netops/nstest"
)

// The escape suite's packets: whole frames built from an end's addresses
// and a tag that makes each one unique (the IPv4 identification or the
// IPv6 flow label, and the source port or ICMP identifier), so that the
// trace, the captures and the listeners tell every packet apart.

// end is one end of the suite's traffic: the attacker, or what it sends
// to (a pod, the node).
type end struct {
	ip4, ip6, ll6 netip.Addr // ll6: the end's IPv6 link-local address
	mac           net.HardwareAddr
}

// addr is the end's address of the family (v6), its link-local one with ll.
func (e end) addr(v6, ll bool) netip.Addr {
	switch {
	case ll:
		return e.ll6
	case v6:
		return e.ip6
	}
	return e.ip4
}

// sent is one packet of a class as sent: its frames, and what identifies
// it (sig) wherever it is seen.
type sent struct {
	frames [][]byte
	sig    sig
	// transport is the start of what follows the IP headers (a raw
	// listener's view), nil for ARP.
	transport []byte
	proto     int // the protocol after the IP headers
}

// sig identifies a packet: an IPv4 or IPv6 packet by its addresses and
// tag (identification, flow label), which reassembly and forwarding keep;
// an ARP message by its bytes.
type sig struct {
	src, dst netip.Addr
	tag      uint32
	arp      []byte
}

// matches reports whether the network header h (an IP header, or an ARP
// message) is the packet s names.
func (s sig) matches(h []byte) bool {
	if s.arp != nil {
		return len(h) >= len(s.arp) && bytes.Equal(h[:len(s.arp)], s.arp)
	}
	if len(h) >= 20 && h[0]>>4 == 4 && s.src.Is4() {
		src, dst := netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
		return src == s.src && dst == s.dst && uint32(binary.BigEndian.Uint16(h[4:])) == s.tag
	}
	if len(h) >= 40 && h[0]>>4 == 6 && s.src.Is6() {
		src, dst := netip.AddrFrom16([16]byte(h[8:24])), netip.AddrFrom16([16]byte(h[24:40]))
		return src == s.src.WithZone("") && dst == s.dst.WithZone("") && binary.BigEndian.Uint32(h)&0xfffff == s.tag
	}
	return false
}

// frameMatches reports whether the Ethernet frame f carries the packet s
// names.
func (s sig) frameMatches(f []byte) bool { return len(f) > 14 && s.matches(f[14:]) }

// packet is an IP packet of proto from src to dst with transport t (its
// bytes after the IP header), tagged, to mac: an IPv4 packet with
// identification tag, or an IPv6 one with flow label tag and the
// extension headers ext.
func packet(from end, mac net.HardwareAddr, src, dst netip.Addr, proto int, tag uint16, t []byte, ext ...nstest.IPv6Ext) sent {
	var l3 []byte
	typ := uint16(nstest.EtherIPv4)
	if src.Is6() {
		typ = nstest.EtherIPv6
		l3 = nstest.IPv6Packet{Src: src, Dst: dst, FlowLabel: uint32(tag), Ext: ext, Proto: byte(proto), Payload: t}.Bytes()
	} else {
		l3 = nstest.IPv4Packet{Src: src, Dst: dst, Proto: byte(proto), ID: tag, Payload: t}.Bytes()
	}
	return sent{frames: [][]byte{nstest.EtherFrame(mac, from.mac, typ, l3)}, sig: sig{src: src, dst: dst, tag: uint32(tag)},
		transport: t, proto: proto}
}

// tcpSeg is a TCP segment from src:tag to dst:port with flags and payload.
func tcpSeg(src, dst netip.Addr, tag, port uint16, flags byte, payload []byte) []byte {
	return nstest.TCPSegment(src, dst, tag, port, flags, payload).Data
}

// udpDgram is a UDP datagram from src:tag to dst:port.
func udpDgram(src, dst netip.Addr, tag, port uint16) []byte {
	return nstest.UDPDatagram(src, dst, tag, port, []byte("escape")).Data
}

// icmpError is an ICMP error of type typ and code from src to dst (the
// 4 bytes after the checksum zero) quoting a UDP datagram dst never sent
// (from dst:tag to src:53): an error about no connection.
func icmpError(src, dst netip.Addr, tag uint16, typ, code byte) []byte {
	about := nstest.UDPDatagram(dst, src, tag, 53, nil)
	quote := append(ipHeaderOf(about), about.Data...)
	return nstest.ICMPMessage(src, dst, typ, code, make([]byte, 4), quote).Data
}

// ipHeaderOf is the IP header p would be sent with.
func ipHeaderOf(p nstest.RawPacket) []byte {
	if p.Src.Is6() {
		return nstest.IPv6Packet{Src: p.Src, Dst: p.Dst, Proto: byte(p.Proto), Payload: p.Data}.Bytes()[:40]
	}
	return nstest.IPv4Packet{Src: p.Src, Dst: p.Dst, Proto: byte(p.Proto), Payload: p.Data}.Bytes()[:20]
}

// generic is the payload of a packet of a protocol the suite knows
// nothing of: the tag, then text.
func generic(tag uint16) []byte {
	return append(binary.BigEndian.AppendUint16(nil, tag), "escape!!"...)
}

// gre is a GRE header (version 0, no key) carrying the tag.
func gre(tag uint16) []byte { return append([]byte{0, 0, 0x08, 0x00}, generic(tag)...) }

// sctpInit is an SCTP packet from tag to port with one INIT chunk, its
// CRC32c right (bad: wrong).
func sctpInit(tag, port uint16, bad bool) []byte {
	b := binary.BigEndian.AppendUint16(nil, tag)
	b = binary.BigEndian.AppendUint16(b, port)
	b = append(b, make([]byte, 8)...)                            // verification tag 0, checksum
	b = append(b, 1, 0, 0, 20)                                   // INIT, 20 bytes
	b = binary.BigEndian.AppendUint32(b, 0x5ca1ab1e)             // initiate tag
	b = binary.BigEndian.AppendUint32(b, 65536)                  // a_rwnd
	b = append(b, 0, 1, 0, 1)                                    // streams out, in
	b = binary.BigEndian.AppendUint32(b, uint32(tag)<<16|0x0101) // initial TSN
	sum := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	if bad {
		sum++
	}
	binary.LittleEndian.PutUint32(b[8:], sum)
	return b
}

// fragments4 are IPv4 fragments of an IPv4 packet of proto with
// transport t (split at the 8-byte units of cuts), those of keep.
func fragments4(from end, mac net.HardwareAddr, src, dst netip.Addr, proto int, tag uint16, t []byte, cuts []int, keep ...int) sent {
	s := sent{sig: sig{src: src, dst: dst, tag: uint32(tag)}, transport: t, proto: proto}
	bounds := append(append([]int{0}, cuts...), len(t))
	for _, i := range keep {
		p := nstest.IPv4Packet{Src: src, Dst: dst, Proto: byte(proto), ID: tag, Offset: uint16(bounds[i] / 8),
			More: i+1 < len(bounds)-1, Payload: t[bounds[i]:bounds[i+1]]}
		s.frames = append(s.frames, nstest.EtherFrame(mac, from.mac, nstest.EtherIPv4, p.Bytes()))
	}
	return s
}

// fragments6 is fragments4 for IPv6: fragment headers of identification
// tag.
func fragments6(from end, mac net.HardwareAddr, src, dst netip.Addr, proto int, tag uint16, t []byte, cuts []int, keep ...int) sent {
	s := sent{sig: sig{src: src, dst: dst, tag: uint32(tag)}, transport: t, proto: proto}
	bounds := append(append([]int{0}, cuts...), len(t))
	for _, i := range keep {
		fh := nstest.FragmentHeader(uint16(bounds[i]/8), i+1 < len(bounds)-1, uint32(tag))
		p := nstest.IPv6Packet{Src: src, Dst: dst, FlowLabel: uint32(tag), Ext: []nstest.IPv6Ext{fh}, Proto: byte(proto),
			Payload: t[bounds[i]:bounds[i+1]]}
		s.frames = append(s.frames, nstest.EtherFrame(mac, from.mac, nstest.EtherIPv6, p.Bytes()))
	}
	return s
}

// arpFrame is an ARP message from from's MAC (op, sender address spa,
// target tpa) broadcast, or to mac; its target hardware address carries
// the tag (a request's is ignored).
func arpFrame(from end, mac net.HardwareAddr, op uint16, spa, tpa netip.Addr, tag uint16) sent {
	tha := net.HardwareAddr{0x02, 0, 0, 0, byte(tag >> 8), byte(tag)}
	m := nstest.ARPMessage(op, from.mac, spa, tha, tpa)
	if mac == nil {
		mac = broadcastMAC
	}
	return sent{frames: [][]byte{nstest.EtherFrame(mac, from.mac, nstest.EtherARP, m)}, sig: sig{arp: m}}
}

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// multicastMAC is the Ethernet group address of the IP multicast
// address a.
func multicastMAC(a netip.Addr) net.HardwareAddr {
	b := a.AsSlice()
	if a.Is6() {
		return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
	}
	return net.HardwareAddr{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}
}

// neighbourAdvert is an ICMPv6 neighbour advertisement (solicited and
// override flags) for target at from's MAC, from src to dst.
func neighbourAdvert(from end, src, dst, target netip.Addr) []byte {
	t16 := target.As16()
	opt := append([]byte{2, 1}, from.mac...)
	return nstest.ICMPMessage(src, dst, 136, 0, []byte{0x60, 0, 0, 0}, append(t16[:], opt...)).Data
}

// neighbourSolicit is an ICMPv6 neighbour solicitation for target from
// src (with from's MAC) to dst.
func neighbourSolicit(from end, src, dst, target netip.Addr) []byte {
	t16 := target.As16()
	opt := append([]byte{1, 1}, from.mac...)
	return nstest.ICMPMessage(src, dst, 135, 0, make([]byte, 4), append(t16[:], opt...)).Data
}

// transport makes the bytes after the IP headers of a packet from src to
// dst, tagged.
type transport func(src, dst netip.Addr, tag uint16) []byte

// build makes one packet of a class from the attacker a to the target
// to, tagged.
type build func(a, to end, tag uint16) sent

// kit builds the packets of one family.
type kit struct{ v6 bool }

// via says where a packet of kit.pkt goes: from a's link-local address
// (fromLL) or src (forged), to to's link-local address (toLL) or dst, at
// mac (else to's), through the extension headers ext.
type via struct {
	fromLL, toLL bool
	src, dst     netip.Addr
	mac          net.HardwareAddr
	ext          []nstest.IPv6Ext
}

// pkt builds a packet of proto with transport tr, as v says.
func (k kit) pkt(proto int, tr transport, v via) build {
	return func(a, to end, tag uint16) sent {
		src, dst, mac := a.addr(k.v6, v.fromLL), to.addr(k.v6, v.toLL), to.mac
		if v.src.IsValid() {
			src = v.src
		}
		if v.dst.IsValid() {
			dst = v.dst
		}
		if v.mac != nil {
			mac = v.mac
		}
		return packet(a, mac, src, dst, proto, tag, tr(src, dst, tag), v.ext...)
	}
}

// icmp is the family's ICMP protocol.
func (k kit) icmp() int {
	if k.v6 {
		return nstest.ProtoICMPv6
	}
	return nstest.ProtoICMP
}

// pick is s4, or s6 for IPv6.
func (k kit) pick(s4, s6 string) string {
	if k.v6 {
		return s6
	}
	return s4
}

// addr is the address s4 or, for IPv6, s6.
func (k kit) addr(s4, s6 string) netip.Addr { return netip.MustParseAddr(k.pick(s4, s6)) }

// group is a packet to the group address s4/s6 at its group MAC.
func (k kit) group(s4, s6 string) via {
	g := k.addr(s4, s6)
	return via{dst: g, mac: multicastMAC(g)}
}

// mangle builds b's packet and then changes its first frame (its
// transport at th).
func (k kit) mangle(b build, change func(f []byte, th int)) build {
	return func(a, to end, tag uint16) sent {
		s := b(a, to, tag)
		th := 14 + 20
		if k.v6 {
			th = 14 + 40
		}
		change(s.frames[0], th)
		return s
	}
}

// frags builds a TCP SYN to port 80 with 8 bytes of data (28 bytes) in
// two fragments of 24 and 4 bytes (IPv6's first carries the whole TCP
// header, RFC 7112), those of keep.
func (k kit) frags(keep ...int) build {
	return func(a, to end, tag uint16) sent {
		src, dst := a.addr(k.v6, false), to.addr(k.v6, false)
		t := tcpSeg(src, dst, tag, 80, nstest.TCPSyn, []byte("fragment"))
		if k.v6 {
			return fragments6(a, to.mac, src, dst, nstest.ProtoTCP, tag, t, []int{24}, keep...)
		}
		return fragments4(a, to.mac, src, dst, nstest.ProtoTCP, tag, t, []int{24}, keep...)
	}
}

// tcpT is a TCP segment to port with flags.
func tcpT(port uint16, flags byte) transport {
	return func(src, dst netip.Addr, tag uint16) []byte { return tcpSeg(src, dst, tag, port, flags, nil) }
}

// udpT is a UDP datagram to port.
func udpT(port uint16) transport {
	return func(src, dst netip.Addr, tag uint16) []byte { return udpDgram(src, dst, tag, port) }
}

// echoT is an ICMP echo request, or reply, with data.
func echoT(reply bool) transport {
	return func(src, dst netip.Addr, tag uint16) []byte {
		return nstest.ICMPEcho(src, dst, reply, tag, 1, []byte("a channel the policies cut")).Data
	}
}

// errT is an ICMP error of type typ4 (typ6 for IPv6) and code about no
// connection.
func errT(typ4, typ6, code byte) transport {
	return func(src, dst netip.Addr, tag uint16) []byte {
		typ := typ4
		if src.Is6() {
			typ = typ6
		}
		return icmpError(src, dst, tag, typ, code)
	}
}

// rawT is a transport of bytes of f's making (a protocol the suite knows
// nothing of).
func rawT(f func(tag uint16) []byte) transport {
	return func(_, _ netip.Addr, tag uint16) []byte { return f(tag) }
}

// fixTCPSum writes the checksum of the TCP segment at th of frame f
// (after an IPv4 or IPv6 header at 14) again.
func fixTCPSum(f []byte, th int) {
	var src, dst netip.Addr
	if f[14]>>4 == 6 {
		src, dst = netip.AddrFrom16([16]byte(f[22:38])), netip.AddrFrom16([16]byte(f[38:54]))
	} else {
		src, dst = netip.AddrFrom4([4]byte(f[26:30])), netip.AddrFrom4([4]byte(f[30:34]))
	}
	seg := f[th:]
	seg[16], seg[17] = 0, 0
	binary.BigEndian.PutUint16(seg[16:], nstest.TransportChecksum(src, dst, nstest.ProtoTCP, seg))
}

// fixIPSum writes the IPv4 header checksum of frame f again.
func fixIPSum(f []byte) {
	h := f[14 : 14+max(20, int(f[14]&0xf)*4)]
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], nstest.HeaderChecksum(h))
}
