package policynft_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The escape suite's differential half: packets of the suite's classes
// made from a fuzz input, sent from y/atk to x/victim under policies that
// allow some of them, and what becomes of each (delivered, or dropped
// and counted where) compared with Model.Evaluate's verdict on the same
// connection. Where Evaluate has no verdict to give (what conntrack
// cannot place in a connection, a fragment alone, a header the stack
// refuses), the table or the stack must drop it. One lab per process:
// each input costs a few milliseconds (a second for a fragment alone,
// which waits for its reassembly to expire), so make fuzz runs the
// target for a count of inputs and make test its seeds.

// diffPolicies: x/victim admits from y/atk TCP 80, TCP 8083-8090, UDP 53
// and SCTP 80; y/atk may send to x/victim TCP 80, TCP 8080-8085, UDP 53
// and 54, SCTP 80. So TCP 80 and 8083-8085, UDP 53 and SCTP 80 are
// allowed, TCP 8080-8082 and UDP 54 dropped by x/victim's isolation, and
// the rest (ICMP, other protocols and ports) by y/atk's.
func diffPolicies() []*networkingv1.NetworkPolicy {
	victim := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "x"), PodSelector: sel("app", "victim")}}
	atk := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("app", "atk")}}
	return []*networkingv1.NetworkPolicy{
		np("x", "victim-in", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "victim"), PolicyTypes: ingress,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: atk,
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80), port(tcp, 8083, 8090), port(udp, 53), port(sctp, 80)}}}}),
		np("y", "atk-out", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "atk"), PolicyTypes: egress,
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: victim,
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80), port(tcp, 8080, 8085), port(udp, 53), port(udp, 54), port(sctp, 80)}}}}),
	}
}

// The forms of a fuzz packet: as built, or changed.
const (
	formPlain     = iota
	formBadSum    // its transport's checksum wrong
	formFrags     // in two fragments (reassembled, then judged)
	formFirstFrag // its first fragment alone
	formLaterFrag // its second fragment alone
	formExt       // IPv6: a hop-by-hop header first; IPv4: a record route option
	formTrailing  // bytes past the IP length in the frame
	formLongIP    // an IP length past the frame
	formBadOffset // TCP: a data offset past the segment
	forms
)

// fuzzPacket is a packet of the suite's classes, as decoded from a fuzz
// input.
type fuzzPacket struct {
	v6    bool
	proto int    // TCP, UDP, ICMP, SCTP, GRE, 253
	port  uint16 // TCP, UDP, SCTP
	bits  byte   // TCP flags, ICMP type, SCTP: the CRC wrong if odd
	form  int
	group bool   // to a link-local group at its group MAC, not the victim
	ll    bool   // IPv6: to the victim's link-local address
	data  []byte // the payload (TCP, UDP, ICMP), 8 to 32 bytes
}

// fuzzPorts are ports the policies name, or next to them.
var fuzzPorts = []uint16{80, 81, 53, 54, 8079, 8080, 8082, 8083, 8085, 8086, 8090, 8091, 9, 443}

var fuzzProtos = []int{nstest.ProtoTCP, nstest.ProtoTCP, nstest.ProtoUDP, nstest.ProtoICMP, 132, 47, 253}

// decodeFuzz makes a packet of b: b[0] the family and protocol, b[1:3]
// the port, b[3] the flags or type, b[4] the form and destination, the
// rest the payload.
func decodeFuzz(b []byte) fuzzPacket {
	b = append(b[:len(b):len(b)], make([]byte, max(0, 13-len(b)))...)
	p := fuzzPacket{v6: b[0]&1 == 1, proto: fuzzProtos[int(b[0]>>1)%len(fuzzProtos)], bits: b[3], form: int(b[4]&0xf) % forms}
	if p.proto == nstest.ProtoICMP && p.v6 {
		p.proto = nstest.ProtoICMPv6
	}
	p.port = binary.BigEndian.Uint16(b[1:3])
	if b[1] < 0xc0 {
		p.port = fuzzPorts[int(b[2])%len(fuzzPorts)]
	}
	switch b[4] >> 4 {
	case 14:
		p.group = true
	case 15:
		p.ll = p.v6
	}
	p.data = b[5:min(len(b), 5+32)]
	if p.form == formBadSum && sumAt(p.proto) < 0 || p.form == formBadOffset && p.proto != nstest.ProtoTCP {
		p.form = formPlain // a form that means nothing for the protocol
	}
	return p
}

// transport is the packet's transport from src to dst, tagged.
func (p fuzzPacket) transport(src, dst netip.Addr, tag uint16) []byte {
	switch p.proto {
	case nstest.ProtoTCP:
		return tcpSeg(src, dst, tag, p.port, p.bits, p.data)
	case nstest.ProtoUDP:
		return nstest.UDPDatagram(src, dst, tag, p.port, p.data).Data
	case nstest.ProtoICMP, nstest.ProtoICMPv6:
		return nstest.ICMPMessage(src, dst, p.bits, 0, []byte{byte(tag >> 8), byte(tag), 0, 1}, p.data).Data
	case 132:
		return sctpInit(tag, p.port, p.bits&1 == 1)
	case 47:
		return gre(tag)
	}
	return generic(tag)
}

// build makes the packet from a to the victim to.
func (p fuzzPacket) build(a, to end, tag uint16) sent {
	k := kit{v6: p.v6}
	v := via{toLL: p.ll}
	if p.group {
		v = k.group("224.0.0.1", "ff02::1")
	}
	if p.form == formExt && p.v6 {
		v.ext = []nstest.IPv6Ext{{Type: nstest.ExtHopByHop, Body: nstest.PadOptions(6)}}
	}
	b := k.pkt(p.proto, p.transport, v)
	switch p.form {
	case formBadSum:
		return k.mangle(b, func(f []byte, th int) { corrupt(f[th+sumAt(p.proto):], p.proto == nstest.ProtoUDP) })(a, to, tag)
	case formFrags, formFirstFrag, formLaterFrag:
		s := b(a, to, tag)
		keep := map[int][]int{formFrags: {0, 1}, formFirstFrag: {0}, formLaterFrag: {1}}[p.form]
		src, dst := s.sig.src, s.sig.dst
		mac := s.frames[0][0:6]
		// Every transport here is 10 bytes long or more; IPv6's first
		// fragment must hold the transport's header (RFC 7112): TCP's
		// 20 bytes, SCTP's 12 are in its first 24.
		cut := []int{min(24, 8*((len(s.transport)-1)/8))}
		if p.v6 {
			return fragments6(a, mac, src, dst, p.proto, tag, s.transport, cut, keep...)
		}
		return fragments4(a, mac, src, dst, p.proto, tag, s.transport, cut, keep...)
	case formExt:
		if !p.v6 {
			return k.options(b, []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0})(a, to, tag)
		}
	case formTrailing:
		s := b(a, to, tag)
		s.frames[0] = append(s.frames[0], "trailing bytes"...)
		return s
	case formLongIP:
		return k.mangle(b, func(f []byte, _ int) {
			at := 14 + 2 // the IPv4 total length, the IPv6 payload length
			if p.v6 {
				at = 14 + 4
			}
			binary.BigEndian.PutUint16(f[at:], binary.BigEndian.Uint16(f[at:])+1)
			if !p.v6 {
				fixIPSum(f)
			}
		})(a, to, tag)
	case formBadOffset:
		return k.mangle(b, func(f []byte, th int) { f[th+12] = 15 << 4; fixTCPSum(f, th) })(a, to, tag)
	}
	return b(a, to, tag)
}

// sumAt is where the checksum of a transport of proto is (none: past the
// tag of a generic one).
func sumAt(proto int) int {
	switch proto {
	case nstest.ProtoTCP:
		return 16
	case nstest.ProtoUDP:
		return 6
	case 132:
		return 8
	case nstest.ProtoICMP, nstest.ProtoICMPv6:
		return 2
	}
	return -1
}

// corrupt makes the checksum at b wrong (never UDP's "no checksum", 0).
func corrupt(b []byte, udp bool) {
	v := binary.BigEndian.Uint16(b) ^ 0x0101
	if udp && v == 0 {
		v = 0x0202
	}
	binary.BigEndian.PutUint16(b, v)
}

// want is what must become of p from a to the victim to, by m: for a
// packet conntrack places in a new connection (its rules below),
// delivered if Evaluate allows both directions, else dropped on the
// isolation counter of the direction that denies it; for the rest, the
// drop that owns its kind.
func (p fuzzPacket) want(m *policymodel.Model, s sent) outcome {
	reasm, trunc := "Ip.ReasmFails", "IpExt.InTruncatedPkts"
	if p.v6 {
		reasm, trunc = "Ip6ReasmFails", "Ip6InTruncatedPkts"
	}
	// Neighbour and multicast listener discovery, which conntrack never
	// tracks: the link-local chain and the table pass it unjudged.
	nd := p.proto == nstest.ProtoICMPv6 && (p.bits >= 130 && p.bits <= 136 || p.bits == 143)
	switch {
	case p.form == formLongIP:
		return stack(trunc)
	case p.form == formFirstFrag, p.form == formLaterFrag:
		return outcome{kind: dropHeld, name: reasm}
	case p.ll && !nd: // fwd6's first rules
		return ll6
	case p.form == formBadSum, p.form == formBadOffset:
		return invalid
	case nd:
		return passes(noNDHop)
	}
	switch p.proto {
	case nstest.ProtoTCP:
		// conntrack starts a connection on SYN, or takes one up on ACK
		// (nf_conntrack_tcp_loose); PSH, ECE and CWR aside.
		switch p.bits &^ (nstest.TCPPsh | 0xc0) {
		case nstest.TCPSyn, nstest.TCPSyn | nstest.TCPUrg, nstest.TCPAck, nstest.TCPAck | nstest.TCPUrg:
		default:
			return invalid
		}
	case nstest.ProtoICMP:
		if p.bits != 8 && p.bits != 13 && p.bits != 15 && p.bits != 17 { // the requests
			return invalid
		}
	case nstest.ProtoICMPv6:
		if p.bits != 128 && p.bits != 139 { // echo and node information requests
			return invalid
		}
	case 132:
		if p.bits&1 == 1 {
			return invalid
		}
	}
	c := policymodel.Conn{Src: s.sig.src, Dst: s.sig.dst, Proto: policymodel.Protocol(p.proto)}
	if p.proto == nstest.ProtoTCP || p.proto == nstest.ProtoUDP || p.proto == 132 {
		c.Port = p.port
	}
	switch {
	case !m.Evaluate(policymodel.Egress, c).Allowed:
		return isoEg
	case !m.Evaluate(policymodel.Ingress, c).Allowed:
		return isoIn
	}
	return passes("Evaluate allows it")
}

func (p fuzzPacket) String() string {
	return fmt.Sprintf("v6 %v proto %d port %d bits %#x form %d group %v ll %v data %d bytes", p.v6, p.proto, p.port, p.bits, p.form, p.group, p.ll, len(p.data))
}

// FuzzEscape is the differential fuzz target: each input one packet, its
// fate compared with Evaluate's verdict (want).
func FuzzEscape(f *testing.F) {
	for _, seed := range escapeSeeds() {
		f.Add(seed)
	}
	e := newEscapeLab(f, escapeConfig{}, diffPolicies()...)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := decodeFuzz(b)
		e.tag++
		s := p.build(e.a, e.to, e.tag)
		e.expect(t, p.String(), s, p.want(e.model, s))
	})
}

// escapeSeeds are one input of each protocol, family and form to the
// victim (a fragment alone, which waits a second, of TCP only), and a
// few to a group and a link-local address: what make test runs.
func escapeSeeds() [][]byte {
	var out [][]byte
	for proto := range fuzzProtos[1:] {
		for _, v6 := range []byte{0, 1} {
			for form := range forms {
				if (form == formFirstFrag || form == formLaterFrag) && proto != 0 {
					continue
				}
				bits := byte(nstest.TCPSyn)
				switch fuzzProtos[proto+1] {
				case nstest.ProtoICMP:
					bits = byte(8 + 120*v6)
				}
				out = append(out, []byte{byte(proto+1)<<1 | v6, 0, byte(form), bits, byte(form), 'e', 's', 'c', 'a', 'p', 'e', '!', '!'})
			}
		}
	}
	// To a group, to a link-local address: TCP SYN, an ICMP echo request,
	// a neighbour solicitation.
	for _, to := range []byte{14 << 4, 15 << 4} {
		out = append(out, []byte{2 | 1, 0, 0, nstest.TCPSyn, to, 'e', 's', 'c', 'a', 'p', 'e', '!', '!'},
			[]byte{3<<1 | 1, 0, 0, 128, to, 'e', 's', 'c', 'a', 'p', 'e', '!', '!'},
			[]byte{3<<1 | 1, 0, 0, 135, to, 'e', 's', 'c', 'a', 'p', 'e', '!', '!'})
	}
	return out
}
