package nft

import (
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The chains and rules of the source address check (layout: srccheck.go).
// Registers: a concatenation's interface name goes in the 32-bit registers
// 8-11 and the address after it (12, or 12-15), other matches in register 1.

// srcChain is one chain of a check table; hook nil for a regular chain.
type srcChain struct {
	name  string
	hook  *nftables.ChainHook
	prio  *nftables.ChainPriority
	rules [][]expr.Any
}

// Ethernet protocol numbers (meta protocol), big-endian.
var (
	ethIP     = []byte{0x08, 0x00}
	ethARP    = []byte{0x08, 0x06}
	ethIP6    = []byte{0x86, 0xdd}
	eth8021Q  = []byte{0x81, 0x00}
	eth8021AD = []byte{0x88, 0xa8}
)

// srcChains are the chains of table st, each after those it jumps to.
func srcChains(st srcTable) []srcChain {
	prio := nftables.ChainPriorityRef(-300)
	is := func(proto []byte, v expr.Any) []expr.Any { return append(protoIs(proto), v) }
	switch st.family {
	case nftables.TableFamilyARP:
		return []srcChain{
			{name: "checkarp", rules: arpRules()},
			{name: "input", hook: nftables.ChainHookRef(0) /* NF_ARP_IN */, prio: nftables.ChainPriorityRef(0), rules: [][]expr.Any{portJump("checkarp")}},
		}
	case nftables.TableFamilyBridge:
		return []srcChain{
			{name: "check4", rules: ip4Rules()},
			{name: "checkarp", rules: arpRules()},
			{name: "na6", rules: na6Rules()},
			{name: "nd6", rules: nd6Rules()},
			{name: "check6", rules: ip6Rules()},
			{name: "check", rules: [][]expr.Any{
				is(ethIP, goTo("check4")),
				is(ethARP, goTo("checkarp")),
				is(ethIP6, goTo("check6")),
				// A frame with a second VLAN tag: its IP packet is out of
				// the rules' reach.
				is(eth8021Q, drop()),
				is(eth8021AD, drop()),
			}},
			{name: "prerouting", hook: nftables.ChainHookPrerouting, prio: prio, rules: [][]expr.Any{known4(), portJump("check")}},
		}
	}
	return []srcChain{
		{name: "check4", rules: ip4Rules()},
		{name: "na6", rules: na6Rules()},
		{name: "nd6", rules: nd6Rules()},
		{name: "check6", rules: ip6Rules()},
		{name: "check", rules: [][]expr.Any{is(ethIP, goTo("check4")), is(ethIP6, goTo("check6"))}},
		{name: "prerouting", hook: nftables.ChainHookPrerouting, prio: prio, rules: [][]expr.Any{known4(), portJump("check")}},
	}
}

// known4 is "meta protocol ip iifname . ip saddr @addr4 return": most of
// what pods send, passed on one lookup before the port's (a pair is in
// addr4 only while its port is in ports), where check4 would pass it
// after two lookups and two jumps.
func known4() []expr.Any {
	return rule(ret(), protoIs(ethIP), pairIn(expr.PayloadBaseNetworkHeader, 12, 4, srcAddr4))
}

// protoIs is "meta protocol <proto>" (an Ethernet protocol number).
func protoIs(proto []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: proto}}
}

func goTo(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain} }
func drop() expr.Any             { return &expr.Verdict{Kind: expr.VerdictDrop} }
func ret() expr.Any              { return &expr.Verdict{Kind: expr.VerdictReturn} }

// portJump is "iifname @ports jump <chain>".
func portJump(chain string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: srcPorts},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: chain},
	}
}

// pairIn is "iifname . <payload base, off, n> @set".
func pairIn(base expr.PayloadBase, off, n uint32, set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 8},
		&expr.Payload{DestRegister: 12, Base: base, Offset: off, Len: n},
		&expr.Lookup{SourceRegister: 8, SetName: set},
	}
}

// load is "<payload base, off, n> == value" (masked with mask if not nil).
func load(base expr.PayloadBase, off uint32, value, mask []byte) []expr.Any {
	n := uint32(len(value))
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: base, Offset: off, Len: n}}
	if mask != nil {
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)})
	}
	return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: value})
}

// l4 is "meta l4proto p".
func l4(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func rule(v expr.Any, parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return append(out, v)
}

func ip4Rules() [][]expr.Any {
	nh, th := expr.PayloadBaseNetworkHeader, expr.PayloadBaseTransportHeader
	return [][]expr.Any{
		rule(ret(), pairIn(nh, 12, 4, srcAddr4)),
		// A DHCP client before it has an address.
		rule(ret(), load(nh, 12, make([]byte, 4), nil), l4(unix.IPPROTO_UDP), load(th, 0, []byte{0, 68, 0, 67}, nil)),
		{drop()},
	}
}

func arpRules() [][]expr.Any {
	nh := expr.PayloadBaseNetworkHeader
	// arp ptype ip, hlen 6, plen 4: the sender's address at 14.
	ipOverEth := load(nh, 2, []byte{0x08, 0x00, 6, 4}, nil)
	return [][]expr.Any{
		rule(ret(), ipOverEth, pairIn(nh, 14, 4, srcAddr4)),
		// An ARP probe (RFC 5227): no sender address yet.
		rule(ret(), ipOverEth, load(nh, 14, make([]byte, 4), nil)),
		{drop()},
	}
}

// linkLocal is fe80::/10 as a value and a mask.
var (
	linkLocal     = []byte{0xfe, 0x80, 15: 0}
	linkLocalMask = []byte{0xff, 0xc0, 15: 0}
)

func ip6Rules() [][]expr.Any {
	nh, th := expr.PayloadBaseNetworkHeader, expr.PayloadBaseTransportHeader
	icmp6 := func(typ byte) []expr.Any { return append(l4(unix.IPPROTO_ICMPV6), load(th, 0, []byte{typ}, nil)...) }
	jump := func(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }
	return [][]expr.Any{
		// Router advertisements and redirects: a pod is no router.
		rule(drop(), icmp6(134)),
		rule(drop(), icmp6(137)),
		rule(jump("na6"), icmp6(136)),
		// Link-local, from or to: discovery only (nd6 goes on with it or
		// drops it), and the source the port's own (addr6 holds it).
		rule(jump("nd6"), load(nh, 8, linkLocal, linkLocalMask)),
		rule(jump("nd6"), load(nh, 24, linkLocal, linkLocalMask)),
		rule(ret(), pairIn(nh, 8, 16, srcAddr6)),
		// Duplicate address detection, and MLD before a link-local
		// address: discovery only.
		rule(goTo("nd6"), load(nh, 8, make([]byte, 16), nil)),
		{drop()},
	}
}

// nd6Rules return ICMPv6 multicast listener discovery (130-132, 143),
// router solicitations (133), neighbour solicitations and advertisements
// (135, 136), and drop the rest (router advertisements and redirects were
// dropped before).
func nd6Rules() [][]expr.Any {
	th := expr.PayloadBaseTransportHeader
	typeIn := func(first, last byte) []expr.Any {
		return append(l4(unix.IPPROTO_ICMPV6),
			&expr.Payload{DestRegister: 1, Base: th, Offset: 0, Len: 1},
			&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{first}, ToData: []byte{last}})
	}
	return [][]expr.Any{
		rule(ret(), typeIn(130, 133)),
		rule(ret(), typeIn(135, 136)),
		rule(ret(), typeIn(143, 143)),
		{drop()},
	}
}

// na6Rules check the target of a neighbour advertisement (at 8 in it): one
// of the port's addresses, its link-local one included.
func na6Rules() [][]expr.Any {
	th := expr.PayloadBaseTransportHeader
	return [][]expr.Any{
		rule(ret(), pairIn(th, 8, 16, srcAddr6)),
		{drop()},
	}
}
