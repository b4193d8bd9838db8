package nft

import (
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The policy table's entry chains (the layout is in policy.go), and what
// they do with a packet that has no conntrack tuple to be judged by.
//
// The walk judges a connection by its conntrack tuple. Every match loads
// `ct original|reply saddr`, `ct protocol` or `ct reply proto-src`, which
// fail on a packet without a conntrack entry: no rule matches it (not the
// pending drop, not an isolation, not an Admin Deny) and the walk ends in
// its default allow. Two kinds of packet have none (issue 60):
//
//   - INVALID: conntrack could place it in no connection, nor start one
//     with it: an unsolicited ICMP echo reply, a TCP segment with no flags,
//     FIN alone or another combination no connection sends, an ICMP error
//     about no connection it knows, a segment far outside its
//     connection's window. Dropped before anything else, counted on
//     c-invalid and, where the flow log's deny scope takes the packet's
//     own addresses, logged as a deny with the counter "invalid"
//     (kube-proxy's iptables mode drops INVALID on the forward hook too).
//     On the input hook, what a pod of the node sends (its address in the
//     attached set) is dropped so; any other INVALID packet is judged as
//     an untracked one (below): the node's own traffic from elsewhere,
//     which no policy selects (the walk allows it: its fate stays the node
//     firewall's), and a pod attached before the table's attached set
//     existed (its policies judge it).
//   - UNTRACKED: a NOTRACK rule chose it (NodeLocal DNSCache's for
//     169.254.20.10:53), or conntrack never tracks its kind (ICMPv6
//     neighbour and multicast listener discovery). Judged as a new
//     connection by its own addresses: the twin of each walk chain
//     (untrackedChain, "egress4u", "n-<id>-in6u", ...) holds the same
//     rules with each conntrack load replaced by the packet's own field
//     (untrackedRule), the same sets and counters. ND and MLD pass
//     unjudged, as they do everywhere (no policy decides them, as none
//     decides ARP). A reply is judged as a connection of its own, the
//     other way round: NOTRACK makes a policy stateless. Never cached (no
//     mark to carry a verdict): every such packet walks.
//
// RELATED packets (an ICMP error about a connection, conntrack's
// expectations) carry their master's entry: the walk and the verdict
// cache judge them by the master's tuple and mark, so they pass where
// their master does, and an error about a connection the rules deny, or
// about none (INVALID), is dropped.
//
//	chain fwd4 {
//		ct state invalid [log "cnibox:d:invalid"] counter name c-invalid drop
//		ct state untracked goto fwd4u
//		<verdict cache: gen-f>; <pending>; <verdict cache: gen>; goto egress4
//	}
//	chain input4 {
//		ct state invalid ip saddr @attached-4 [log] counter name c-invalid drop
//		ct state invalid,untracked goto input4u   # invalid: not an attached pod's
//		<verdict cache: gen-f>; <pending>; <verdict cache: gen>; goto egress4
//	}
//	chain fwd6u { icmpv6 type { 130-136, 143 } accept   # ND, MLD (fwd4u: none)
//		ip6 saddr @pending-6 counter name c-pending drop; ip6 daddr @pending-6 ...
//		goto egress6u }

// policyInvalid names the counter of the packets conntrack calls INVALID
// (c-invalid) and their log prefix's counter part (cnibox:d:invalid).
const policyInvalid = policymodel.CounterInvalid

// untrackedSuffix ends the name of a walk chain's untracked twin.
const untrackedSuffix = "u"

// untrackedChain is the name of chain c's untracked twin.
func untrackedChain(c string) string { return c + untrackedSuffix }

// renderEntries adds the chains the base chains dispatch to, per family
// (fam "4", "6"): fwd<fam> for a forwarded packet (a pod's to a pod or
// beyond, or to a pod), input<fam> for a pod's to the node. Both drop what
// conntrack calls invalid and send the untracked to their twins (above);
// then accept a connection that both walks allowed at this generation
// (policy_gen.go: gen-f), drop what a pending address sends or receives,
// accept such a connection again (gen), and else walk egress, then
// ingress (allow-eg<fam> goes on to it): both directions in one base
// chain, so a cached packet costs one hook, the two state checks and one
// lookup. The cache may come before the pending check because an ADD that
// marks an address pending empties gen-f in the same batch (genFlushMsg):
// until the agent's next generation, an earlier pod's connection at that
// address, cached before, meets the pending set, and the node's other
// cached connections pay the pending lookups before gen accepts them. On
// the input hook the ingress walk meets only the node's addresses, which
// no set holds: it ends in the default allow.
func renderEntries(pc *policyChains, v6 bool) {
	d := policyDir{v6: v6}
	fam := d.fam()
	pending := func(dir uint32) []expr.Any {
		return append(d.inSet(dir, PolicyPending, false), countAnd(counterName(PolicyPending), verdict(expr.VerdictDrop, ""))...)
	}
	cachedFast := append(ctMarkIn(policyMarkMask, policyGenFastSet), verdict(expr.VerdictAccept, ""))
	cached := append(ctMarkIn(policyMarkMask, policyGenSet), verdict(expr.VerdictAccept, ""))
	walk := []expr.Any{verdict(expr.VerdictGoto, "egress"+fam)}
	invalid := ctState(expr.CtStateBitINVALID)
	toTwin := func(bits uint32, entry string) []expr.Any {
		return append(ctState(bits), verdict(expr.VerdictGoto, untrackedChain(entry)))
	}

	fwd, input := "fwd"+fam, "input"+fam
	pc.add(fwd, d.invalidRules(pc, invalid)...)
	pc.add(fwd, toTwin(expr.CtStateBitUNTRACKED, fwd), cachedFast, pending(0), pending(1), cached, walk)
	pc.add(input, d.invalidRules(pc, slices.Concat(invalid, d.inSet(0, PolicyAttached, false)))...)
	pc.add(input, toTwin(expr.CtStateBitINVALID|expr.CtStateBitUNTRACKED, input), cachedFast, pending(0), cached, walk)

	// The twins: ND and MLD, then the pending set by the packet's
	// addresses, then the untracked walk.
	var nd [][]expr.Any
	if v6 {
		nd = untrackedDiscovery()
	}
	pc.add(untrackedChain(fwd), nd...)
	pc.add(untrackedChain(fwd), untrackedRule(pending(0), v6), untrackedRule(pending(1), v6),
		[]expr.Any{verdict(expr.VerdictGoto, untrackedChain("egress"+fam))})
	pc.add(untrackedChain(input), nd...)
	pc.add(untrackedChain(input), untrackedRule(pending(0), v6),
		[]expr.Any{verdict(expr.VerdictGoto, untrackedChain("egress"+fam))})
}

// invalidRules are the rules that drop what match matches (a ct state
// invalid match, with conntrack loads standing for the packet's own
// fields), counted on c-invalid and, where the flow log's deny scope
// takes the packet's source or destination, logged first. Staged policies
// log nothing here: no policy decides these packets.
func (d policyDir) invalidRules(pc *policyChains, match []expr.Any) [][]expr.Any {
	var out [][]expr.Any
	if pc.log.Deny.On() {
		out = d.logRules(match, pc.log.Deny, "", policymodel.LogPrefix(false, policyInvalid))
	}
	out = append(out, append(append([]expr.Any{}, match...), countAnd(counterName(policyInvalid), verdict(expr.VerdictDrop, ""))...))
	for i := range out {
		out[i] = untrackedRule(out[i], d.v6)
	}
	return out
}

// untrackedDiscovery are the rules that accept ICMPv6 router, neighbour
// and multicast listener discovery (types 130-136 and 143, those conntrack
// leaves untracked): a link without them has no IPv6.
func untrackedDiscovery() [][]expr.Any {
	icmp := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
	}
	return [][]expr.Any{
		append(append([]expr.Any{}, icmp...),
			&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{130}, ToData: []byte{136}}, verdict(expr.VerdictAccept, "")),
		append(append([]expr.Any{}, icmp...),
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{143}}, verdict(expr.VerdictAccept, "")),
	}
}

// renderUntracked adds the untracked twin of each walk chain of names (of
// one family) to pc, with the fingerprint key of its chain if it has one.
// A twin's rules are its chain's, each made untracked (untrackedRule): a
// delta renders them only for the twins it writes (twinRules), those
// whose chain changed, as one fingerprint tells both apart
// (fingerprints: a twin's is its chain's).
func renderUntracked(pc *policyChains, names []string, v6 bool) {
	for _, n := range names {
		twin := untrackedChain(n)
		pc.add(twin)
		if pc.twins == nil {
			pc.twins = map[string]twinOf{}
		}
		pc.twins[twin] = twinOf{chain: n, v6: v6}
		if k, ok := pc.keys[n]; ok {
			pc.keys[twin] = k
		}
		if pc.keep == nil && !pc.lazyTwins { // a full sync writes them all
			pc.twinRules(twin)
		}
	}
}

// twinLazy is the rules of a twin of a chain of rules, made as the twin
// is queued (chainSpec.lazy): a full sync keeps no second copy of the
// walk's rules.
func twinLazy(rules [][]expr.Any, v6 bool) *lazyRules {
	l := &lazyRules{n: len(rules)}
	for _, r := range rules {
		l.exprs += len(r)
	}
	l.make = func() []*nftables.Rule {
		out := make([][]expr.Any, len(rules))
		for i, r := range rules {
			out[i] = untrackedRule(r, v6)
		}
		return ruleList(out)
	}
	return l
}

// twinOf is the walk chain an untracked twin is made of, and its family.
type twinOf struct {
	chain string
	v6    bool
}

// twinRules renders the rules of twin, an untracked twin, if they are
// not yet (a twin's chain never changes once rendered).
func (pc *policyChains) twinRules(twin string) {
	t, ok := pc.twins[twin]
	if !ok || pc.twinsDone[twin] {
		return
	}
	if pc.twinsDone == nil {
		pc.twinsDone = map[string]bool{}
	}
	pc.twinsDone[twin] = true
	rules := make([][]expr.Any, 0, len(pc.rules[t.chain]))
	for _, r := range pc.rules[t.chain] {
		rules = append(rules, untrackedRule(r, t.v6))
	}
	pc.rules[twin] = rules
}

// untrackedRule is r with each conntrack load replaced by the packet's
// own field (the packet is the first of a new connection: its source is
// the original source, its destination the reply's, its destination port
// the reply's source port) and each jump or goto to a walk chain by one to
// its twin. The walk's allows become the twin's: egress goes on to the
// ingress twin, ingress accepts (no mark: no conntrack to carry it).
func untrackedRule(r []expr.Any, v6 bool) []expr.Any {
	out := make([]expr.Any, len(r))
	for i, e := range r {
		out[i] = e
		switch e := e.(type) {
		case *expr.Ct:
			if e.SourceRegister {
				continue
			}
			switch e.Key {
			case expr.CtKeySRC:
				out[i] = addrField(e.Register, e.Direction>>24 == 0, v6)
			case expr.CtKeyPROTOCOL:
				out[i] = &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: e.Register}
			case expr.CtKeyPROTOSRC:
				off := uint32(2) // the reply's source port: the destination port
				if e.Direction>>24 == 0 {
					off = 0
				}
				out[i] = &expr.Payload{DestRegister: e.Register, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2}
			}
		case *expr.Verdict:
			if e.Chain == "" {
				continue
			}
			switch {
			case e.Chain == allowChain("in"):
				out[i] = verdict(expr.VerdictAccept, "")
			case e.Chain == allowChain("eg4") || e.Chain == allowChain("eg6"):
				out[i] = verdict(expr.VerdictGoto, untrackedChain("ingress"+e.Chain[len(e.Chain)-1:]))
			default:
				out[i] = verdict(e.Kind, untrackedChain(e.Chain))
			}
		}
	}
	return out
}

// addrField is "ip saddr" (src) or "ip daddr" (ip6 in v6) into reg.
func addrField(reg uint32, src, v6 bool) expr.Any {
	off, n := uint32(16), uint32(4)
	if src {
		off = 12
	}
	if v6 {
		off, n = 24, 16
		if src {
			off = 8
		}
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}
