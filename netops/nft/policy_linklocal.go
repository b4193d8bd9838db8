package nft

import (
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// IPv6 link-local traffic in the policy table (issue 60). No set holds a
// link-local address, so the walk cannot judge what goes from or to one:
// a pod's link-local address would be a way around every policy that
// isolates it or its peer. Pods talk by their API addresses, Kubernetes
// needs no link-local traffic between them, and none is ever routed: the
// forward hook meets it only bridged (br_netfilter), between the ports of
// a bridge. So fwd6 drops it, counted on c-linklocal, before the walk, but
// neighbour and multicast listener discovery (ICMPv6 types 130-136 and
// 143), which go on to the entry chain's rules (conntrack leaves them
// untracked: policy_entry.go passes them):
//
//	chain fwd6 {
//		ip6 saddr fe80::/10 jump ll6
//		ip6 daddr fe80::/10 jump ll6
//		...                            # renderEntries
//	}
//	chain ll6 {
//		icmpv6 type 130-136 return     # MLD, router and neighbour discovery
//		icmpv6 type 143 return         # MLDv2
//		counter name c-linklocal drop
//	}
//
// The input hook is left alone: there the node's own link-local traffic
// arrives too (DHCPv6, BGP or OSPFv3 on its uplinks), which this table
// cannot tell from a pod's by address. A pod's link-local traffic to the
// node is the source address check's: its port passes link-local for
// discovery only (srccheck_linklocal.go).

// policyLinkLocal names the counter of the link-local packets fwd6 drops
// (c-linklocal) and its chain's name stem.
const policyLinkLocal = policymodel.CounterLinkLocal

// linkLocalChain is the chain that judges fwd6's link-local packets.
const linkLocalChain = "ll6"

// renderLinkLocal adds fwd6's link-local rules and their chain to pc; it
// runs before renderEntries, so they come first in fwd6. IPv4 has none.
func renderLinkLocal(pc *policyChains, v6 bool) {
	if !v6 {
		return
	}
	nh, th := expr.PayloadBaseNetworkHeader, expr.PayloadBaseTransportHeader
	jump := verdict(expr.VerdictJump, linkLocalChain)
	pc.add("fwd6",
		rule(jump, load(nh, 8, linkLocal, linkLocalMask)),
		rule(jump, load(nh, 24, linkLocal, linkLocalMask)))
	typeIn := func(first, last byte) []expr.Any {
		return append(l4(unix.IPPROTO_ICMPV6),
			&expr.Payload{DestRegister: 1, Base: th, Offset: 0, Len: 1},
			&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{first}, ToData: []byte{last}})
	}
	pc.add(linkLocalChain,
		rule(verdict(expr.VerdictReturn, ""), typeIn(130, 136)),
		rule(verdict(expr.VerdictReturn, ""), typeIn(143, 143)),
		countAnd(counterName(policyLinkLocal), verdict(expr.VerdictDrop, "")))
}
