package policynft_test

import (
	"net"
	"net/netip"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The escape suite's packet classes: what an attacker pod sends to get
// around deny-all policies, and what must stop each (docs/policy.md,
// "Escape suite", has this table in words).

// escapeConfig is one setting of the suite: whether the attacker's port
// has the source address check (the bridge role's default; without it,
// "ipspoofchk": false, a trusted network), whether the target is the node
// rather than a pod, and whether the attacker is on another node, across
// the overlay (its frames come in on the target node's VXLAN device,
// routed to the victim: no port of the target node's to check).
type escapeConfig struct{ checked, node, overlay bool }

func (c escapeConfig) String() string {
	s := "pod"
	switch {
	case c.node:
		s = "node"
	case c.overlay:
		return "overlay"
	}
	if c.checked {
		return s + "-checked"
	}
	return s + "-unchecked"
}

// outcomeKind is where a packet of a class ends.
type outcomeKind int

const (
	dropCounted   outcomeKind = iota // a drop of the policy table: the counter
	dropChecked                      // the source address check's: the chain of table bridge cnibox-src
	dropStack                        // the node's stack before any hook: the IP statistic that counts it
	dropHeld                         // reassembly holds it for the rest, which never comes: the statistic of its expiry
	delivered                        // the target gets it whatever the policies: why
	unrouted                         // the node's stack drops it before any hook of the table (why), no counter
	notApplicable                    // the class needs the attacker on the target's link (why)
)

// outcome is what must become of a packet of a class.
type outcome struct {
	kind outcomeKind
	name string // the counter, chain or statistic
	why  string // delivered: why that is right
}

func (o outcome) String() string {
	switch o.kind {
	case dropCounted:
		return "dropped, counted on " + o.name
	case dropChecked:
		return "dropped by the source address check (" + nft.SrcCheckTable + " chain " + o.name + ")"
	case dropStack:
		return "dropped by the node's stack before any hook, counted in " + o.name
	case dropHeld:
		return "held by reassembly until it expires, counted in " + o.name
	case unrouted:
		return "dropped by the node's stack before the table: " + o.why
	case notApplicable:
		return "not applicable: " + o.why
	}
	return "delivered: " + o.why
}

var (
	invalid  = outcome{kind: dropCounted, name: "c-invalid"}
	isoEg    = outcome{kind: dropCounted, name: "c-iso-eg"}
	isoIn    = outcome{kind: dropCounted, name: "c-iso-in"}
	ll6      = outcome{kind: dropCounted, name: "c-linklocal"}
	noARPHop = "ARP is no IP packet: no hook of the policy table sees it; only the source address check knows whose address a port may claim"
	noNDHop  = "neighbour discovery is never tracked and passes the policy table unjudged (IPv6 needs it); only the source address check knows whose address a port may claim"
)

func checkedBy(chain string) outcome { return outcome{kind: dropChecked, name: chain} }
func stack(stat string) outcome      { return outcome{kind: dropStack, name: stat} }
func passes(why string) outcome      { return outcome{kind: delivered, why: why} }

// always is the same outcome in every setting.
func always(o outcome) func(escapeConfig) outcome { return func(escapeConfig) outcome { return o } }

// forged is a class the source address check drops (chain) from a
// checked port, and else ends as o.
func forged(chain string, o outcome) func(escapeConfig) outcome {
	return func(c escapeConfig) outcome {
		if c.checked {
			return checkedBy(chain)
		}
		return o
	}
}

// linkLocal is a link-local class that is not discovery: the check's
// from a checked port, else the policy table's link-local drop between
// pods; to the node, the input hook leaves it to the node.
func linkLocal(c escapeConfig) outcome {
	switch {
	case c.overlay:
		return onLinkOnly
	case c.checked:
		return checkedBy("nd6")
	case c.node:
		return passes("the input hook leaves link-local to the node, whose own link-local traffic arrives there too (docs/policy.md, IPv6 link-local)")
	}
	return ll6
}

// toPods is o for a pod target on the node's bridge; the node's stack
// drops it (why) before any hook of the table sees it when it is the
// target, or routes from the overlay.
func toPods(o outcome, why string) func(escapeConfig) outcome {
	return func(c escapeConfig) outcome {
		if c.node || c.overlay {
			return outcome{kind: unrouted, why: why}
		}
		return o
	}
}

// onLinkOnly is the outcome of a class that needs the attacker on the
// target's link (ARP, neighbour discovery, link-local, groups and
// broadcast, the node's own address as a source) across the overlay:
// routing carries none of it.
var onLinkOnly = outcome{kind: notApplicable, why: "needs the attacker on the target's link: routing carries none of it"}

// onLink is w, or onLinkOnly across the overlay.
func onLink(w func(escapeConfig) outcome) func(escapeConfig) outcome {
	return func(c escapeConfig) outcome {
		if c.overlay {
			return onLinkOnly
		}
		return w(c)
	}
}

// notJoined is why the node drops a packet to a group it has not joined.
const notJoined = "a group the node has not joined (no counter)"

// The foreign addresses a forged source claims.
var foreign4, foreign6 = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")

// escapeClass is one kind of packet: how to build one from the attacker
// to the target, and what must become of it.
type escapeClass struct {
	name  string
	build build
	want  func(escapeConfig) outcome
}

// escapeClasses are the suite's classes, IPv4's then IPv6's, each named
// "IPv4/..." or "IPv6/...".
func escapeClasses() []escapeClass {
	var out []escapeClass
	for _, k := range []kit{{v6: false}, {v6: true}} {
		for _, c := range k.classes() {
			c.name = k.pick("IPv4/", "IPv6/") + c.name
			out = append(out, c)
		}
	}
	return out
}

// classes are the classes of k's family.
func (k kit) classes() []escapeClass {
	tcpTo := func(port uint16, flags byte) build { return k.pkt(nstest.ProtoTCP, tcpT(port, flags), via{}) }
	syn := tcpTo(80, nstest.TCPSyn)
	udp80 := k.pkt(nstest.ProtoUDP, udpT(80), via{})
	held := outcome{kind: dropHeld, name: k.pick("Ip.ReasmFails", "Ip6ReasmFails")}
	forgedFrom := func(s4, s6 string) build {
		return k.pkt(nstest.ProtoTCP, tcpT(80, nstest.TCPSyn), via{src: k.addr(s4, s6)})
	}
	check := k.pick("check4", "check6")
	cs := []escapeClass{
		// TCP: flags no connection sends, or none to send them in.
		{"TCP no flags", tcpTo(80, 0), always(invalid)},
		{"TCP FIN alone", tcpTo(80, nstest.TCPFin), always(invalid)},
		{"TCP SYN+FIN", tcpTo(80, nstest.TCPSyn|nstest.TCPFin), always(invalid)},
		{"TCP SYN+RST", tcpTo(80, nstest.TCPSyn|nstest.TCPRst), always(invalid)},
		{"TCP FIN+PSH+URG (xmas)", tcpTo(80, nstest.TCPFin|nstest.TCPPsh|nstest.TCPUrg), always(invalid)},
		{"TCP RST to a closed port", tcpTo(9, nstest.TCPRst), always(invalid)},
		{"TCP RST to an open port", tcpTo(80, nstest.TCPRst), always(invalid)},
		{"TCP SYN+ACK without a connection", tcpTo(80, nstest.TCPSyn|nstest.TCPAck), always(invalid)},
		{"TCP FIN+ACK without a connection", tcpTo(80, nstest.TCPFin|nstest.TCPAck), always(invalid)},
		// conntrack takes a connection up in its middle
		// (nf_conntrack_tcp_loose): judged as a new one.
		{"TCP ACK without a connection", tcpTo(80, nstest.TCPAck), always(isoEg)},
		{"TCP SYN", syn, always(isoEg)},
		// ICMP nobody asked for.
		{"ICMP echo reply with data", k.pkt(k.icmp(), echoT(true), via{}), always(invalid)},
		{"ICMP echo request", k.pkt(k.icmp(), echoT(false), via{}), always(isoEg)},
		{"ICMP port unreachable about no connection", k.pkt(k.icmp(), errT(3, 1, 3), via{}), always(invalid)},
		{"ICMP time exceeded about no connection", k.pkt(k.icmp(), errT(11, 3, 0), via{}), always(invalid)},
		// Fragments are reassembled before conntrack: only whole packets
		// meet a rule.
		{"fragment: the first alone", k.frags(0), always(held)},
		{"fragment: a later one alone", k.frags(1), always(held)},
		{"fragments: both (reassembled, then judged)", k.frags(0, 1), always(isoEg)},
		// Checksums and lengths.
		{"TCP checksum wrong", k.mangle(syn, func(f []byte, th int) { corrupt(f[th+16:], false) }), always(invalid)},
		{"TCP data offset past the segment", k.mangle(syn, func(f []byte, th int) { f[th+12] = 15 << 4; fixTCPSum(f, th) }), always(invalid)},
		{"TCP data offset under 5", k.mangle(syn, func(f []byte, th int) { f[th+12] = 2 << 4; fixTCPSum(f, th) }), always(invalid)},
		{"UDP checksum wrong", k.mangle(udp80, func(f []byte, th int) { corrupt(f[th+6:], true) }), always(invalid)},
		{"UDP length past the packet", k.mangle(udp80, func(f []byte, th int) { f[th+4] = 1 }), always(invalid)},
		{"ICMP checksum wrong", k.mangle(k.pkt(k.icmp(), echoT(false), via{}), func(f []byte, th int) { corrupt(f[th+2:], false) }), always(invalid)},
		{"IP length short of the frame (trimmed, then judged)", func(a, to end, tag uint16) sent {
			s := syn(a, to, tag)
			s.frames[0] = append(s.frames[0], "trailing bytes past the IP length"...)
			return s
		}, always(isoEg)},
		// Protocols no policy names a port of.
		{"protocol 253", k.pkt(253, rawT(generic), via{}), always(isoEg)},
		{"protocol 254", k.pkt(254, rawT(generic), via{}), always(isoEg)},
		{"GRE (47)", k.pkt(47, rawT(gre), via{}), always(isoEg)},
		{"SCTP INIT", k.pkt(132, rawT(func(tag uint16) []byte { return sctpInit(tag, 80, false) }), via{}), always(isoEg)},
		{"SCTP INIT, CRC wrong", k.pkt(132, rawT(func(tag uint16) []byte { return sctpInit(tag, 80, true) }), via{}), always(invalid)},
		// Groups.
		{"UDP to a link-local group at its group MAC", k.pkt(nstest.ProtoUDP, udpT(80), k.group("224.0.0.1", "ff02::1")), onLink(always(isoEg))},
		{"TCP SYN to a site group at the target's MAC", k.pkt(nstest.ProtoTCP, tcpT(80, nstest.TCPSyn), via{dst: k.addr("239.255.0.1", "ff05::1:3")}), onLink(toPods(isoEg, notJoined))},
		// Sources not the attacker's.
		{"TCP SYN from the node's address", forgedFrom(nodeAddr.String(), nodeAddr6.String()), onLink(forged(check, isoIn))},
		{"TCP SYN from a foreign address", forgedFrom(foreign4.String(), foreign6.String()), forged(check, isoIn)},
	}
	if k.v6 {
		return append(cs, k.classes6()...)
	}
	return append(cs, k.classes4()...)
}

// classes4 are IPv4's own classes.
func (k kit) classes4() []escapeClass {
	syn := k.pkt(nstest.ProtoTCP, tcpT(80, nstest.TCPSyn), via{})
	bcast := func(dst string) build {
		return k.pkt(nstest.ProtoUDP, udpT(80), via{dst: netip.MustParseAddr(dst), mac: broadcastMAC})
	}
	arp := func(op uint16, spa func(a, to end) netip.Addr, broadcast bool) build {
		return func(a, to end, tag uint16) sent {
			var mac net.HardwareAddr
			if !broadcast {
				mac = to.mac
			}
			return arpFrame(a, mac, op, spa(a, to), to.ip4, tag)
		}
	}
	own := func(a, _ end) netip.Addr { return a.ip4 }
	theirs := func(_, to end) netip.Addr { return to.ip4 }
	node := func(end, end) netip.Addr { return nodeAddr }
	return []escapeClass{
		{"ICMP redirect about no connection", k.pkt(k.icmp(), errT(5, 0, 1), via{}), always(invalid)},
		{"ICMP unknown type 42", k.pkt(k.icmp(), func(src, dst netip.Addr, tag uint16) []byte {
			return nstest.ICMPMessage(src, dst, 42, 0, []byte{byte(tag >> 8), byte(tag), 0, 1}, []byte("escape")).Data
		}, via{}), always(invalid)},
		{"IP header checksum wrong", k.mangle(syn, func(f []byte, _ int) { f[14+10] ^= 0xff }), always(stack("IpExt.InCsumErrors"))},
		{"IP total length past the frame", k.mangle(syn, func(f []byte, _ int) { f[14+2] += 1; fixIPSum(f) }), always(stack("IpExt.InTruncatedPkts"))},
		{"IP header length under 20", k.mangle(syn, func(f []byte, _ int) { f[14] = 4<<4 | 4; fixIPSum(f) }), always(stack("Ip.InHdrErrors"))},
		{"IP options: record route", k.options(syn, []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0}), always(isoEg)},
		{"IP options: loose source route", k.options(syn, append([]byte{131, 7, 4}, 192, 0, 2, 9, 1)), toPods(isoEg, "source routing is off (accept_source_route 0, no counter)")},
		{"UDP to the limited broadcast", bcast("255.255.255.255"), onLink(always(isoEg))},
		{"UDP to the subnet broadcast", bcast("10.99.0.255"), onLink(always(isoEg))},
		{"TCP SYN to a link-local address at the target's MAC", k.pkt(nstest.ProtoTCP, tcpT(80, nstest.TCPSyn), via{dst: netip.MustParseAddr("169.254.1.1")}),
			onLink(toPods(isoEg, "not its address, and the lab's node forwards nothing (Ip.InAddrErrors)"))},
		{"ARP request, its own address (genuine)", arp(1, own, true), onLink(always(passes("a pod resolves its peers and its gateway by ARP")))},
		{"ARP gratuitous, claiming the target's address", arp(1, theirs, true), onLink(forged("checkarp", passes(noARPHop)))},
		{"ARP reply to the target, claiming the node's address", arp(2, node, false), onLink(forged("checkarp", passes(noARPHop)))},
	}
}

// classes6 are IPv6's own classes.
func (k kit) classes6() []escapeClass {
	syn := tcpT(80, nstest.TCPSyn)
	ext := func(e ...nstest.IPv6Ext) build { return k.pkt(nstest.ProtoTCP, syn, via{ext: e}) }
	hbh := nstest.IPv6Ext{Type: nstest.ExtHopByHop, Body: nstest.PadOptions(6)}
	dst := nstest.IPv6Ext{Type: nstest.ExtDestOpts, Body: nstest.PadOptions(6)}
	nd := func(b func(a, to end, src, dst netip.Addr) []byte, group bool) build {
		return func(a, to end, tag uint16) sent {
			d, mac := to.ll6, to.mac
			if group {
				d = netip.MustParseAddr("ff02::1")
				mac = multicastMAC(d)
			}
			return packet(a, mac, a.ll6, d, nstest.ProtoICMPv6, tag, b(a, to, a.ll6, d))
		}
	}
	icmp6 := func(typ byte, body []byte) func(a, to end, src, dst netip.Addr) []byte {
		return func(_, _ end, src, dst netip.Addr) []byte {
			return nstest.ICMPMessage(src, dst, typ, 0, make([]byte, 4), body).Data
		}
	}
	return []escapeClass{
		{"ICMPv6 packet too big about no connection", k.pkt(k.icmp(), errT(0, 2, 0), via{}), always(invalid)},
		{"ICMPv6 parameter problem about no connection", k.pkt(k.icmp(), errT(0, 4, 0), via{}), always(invalid)},
		{"ICMPv6 unknown informational type 200", k.pkt(k.icmp(), func(src, dst netip.Addr, tag uint16) []byte {
			return nstest.ICMPMessage(src, dst, 200, 0, []byte{byte(tag >> 8), byte(tag), 0, 1}, []byte("escape")).Data
		}, via{}), always(invalid)},
		{"IPv6 payload length past the frame", k.mangle(k.pkt(nstest.ProtoTCP, syn, via{}), func(f []byte, _ int) { f[14+5] += 1 }), always(stack("Ip6InTruncatedPkts"))},
		// conntrack takes it (the stack refuses it later): judged.
		{"UDP checksum zero", k.mangle(k.pkt(nstest.ProtoUDP, udpT(80), via{}), func(f []byte, th int) { f[th+6], f[th+7] = 0, 0 }), always(isoEg)},
		{"fragment header alone (atomic fragment)", ext(nstest.FragmentHeader(0, false, 7)), always(isoEg)},
		{"no next header (59)", k.pkt(59, rawT(generic), via{}), always(invalid)},
		{"hop-by-hop options before TCP", ext(hbh), always(isoEg)},
		{"destination options before TCP", ext(dst), always(isoEg)},
		{"routing header type 0 before TCP", ext(nstest.RoutingType0(1, netip.MustParseAddr("2001:db8::9"))), always(isoEg)},
		{"hop-by-hop, destination options, routing type 0 before TCP", ext(hbh, dst, nstest.RoutingType0(0, netip.MustParseAddr("2001:db8::9"))), always(isoEg)},
		{"TCP SYN from link-local to link-local", k.pkt(nstest.ProtoTCP, syn, via{fromLL: true, toLL: true}), linkLocal},
		{"TCP SYN to the target's link-local address", k.pkt(nstest.ProtoTCP, syn, via{toLL: true}), linkLocal},
		{"TCP SYN from link-local to the target's global address", k.pkt(nstest.ProtoTCP, syn, via{fromLL: true}), linkLocal},
		{"UDP from link-local to ff02::1", k.pkt(nstest.ProtoUDP, udpT(80), via{fromLL: true, dst: netip.MustParseAddr("ff02::1"), mac: multicastMAC(netip.MustParseAddr("ff02::1"))}), linkLocal},
		{"neighbour solicitation (genuine)", nd(func(a, to end, src, dst netip.Addr) []byte { return neighbourSolicit(a, src, dst, to.ll6) }, false), onLink(always(passes("IPv6 needs neighbour discovery")))},
		{"neighbour advertisement for its own address (genuine)", nd(func(a, _ end, src, dst netip.Addr) []byte { return neighbourAdvert(a, src, dst, a.ip6) }, true), onLink(always(passes("IPv6 needs neighbour discovery")))},
		{"neighbour advertisement for the target's address", nd(func(a, to end, src, dst netip.Addr) []byte { return neighbourAdvert(a, src, dst, to.ip6) }, true), onLink(forged("na6", passes(noNDHop)))},
		{"router advertisement", nd(icmp6(134, make([]byte, 8)), true), onLink(forged("check6", passes(noNDHop)))},
		{"redirect", nd(icmp6(137, make([]byte, 32)), false), onLink(forged("check6", ll6))},
	}
}

// options builds b's IPv4 packet with the options opts (padded to a
// multiple of 4 with end-of-options).
func (k kit) options(b build, opts []byte) build {
	return func(a, to end, tag uint16) sent {
		s := b(a, to, tag)
		for len(opts)%4 != 0 {
			opts = append(opts, 0)
		}
		f := s.frames[0]
		p := nstest.IPv4Packet{Src: s.sig.src, Dst: s.sig.dst, Proto: f[14+9], ID: tag, Options: opts, Payload: f[14+20:]}
		s.frames[0] = nstest.EtherFrame(net.HardwareAddr(f[0:6]), net.HardwareAddr(f[6:12]), nstest.EtherIPv4, p.Bytes())
		return s
	}
}
