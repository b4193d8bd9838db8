package nft

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The portmap table's schema: its maps, sets, chains and rules.
//
// The table, its maps and sets and the chains prerouting, output, hostports,
// masq4 and masq6 are a spec on the core (portmapTable): reconcile makes
// what is missing and refills a chain whose rules differ (an older
// cnibox's, or one someone changed). The maps and sets are kept: their
// elements are the pods', added and removed one attachment at a time with
// raw messages (portmap_nft.go), and a set an older cnibox made without the
// timeout flag stays as it is, elements and all (pmRemove then deletes
// instead of expiring).
//
// The postrouting chain and the marker set pmSetRules are written after,
// with raw messages (pmPostroutingMsgs): the chain's rules read the
// connection's original destination (`ct original ip daddr`, `ct original
// proto-dst`), and google/nftables can neither write such a rule (it sends
// NFTA_CT_DIRECTION only with the ct keys src, dst, proto-src and
// proto-dst, and the kernel wants it with ip daddr too) nor list it back
// (it reads the kernel's one-byte direction as four bytes and fails the
// chain's whole listing), so the core cannot compare that chain. Its
// messages create it when missing and flush and refill it, in one
// transaction with the marker, which thus says that every chain holds this
// cnibox's rules.

// portmapTable is the table as the core reconciles it: its maps and sets
// (kept) and every chain but postrouting. The table is not owned: the
// postrouting chain and the marker set are not the spec's.
func portmapTable() *tableSpec {
	s := &tableSpec{table: &nftables.Table{Name: PortMapTable, Family: nftables.TableFamilyINet}, what: "the port mappings' table"}
	for _, set := range pmSetObjs() {
		s.sets = append(s.sets, setSpec{set: set, kept: true})
	}
	jump := func() []*nftables.Rule {
		return []*nftables.Rule{{Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: pmChainHostports}}}}
	}
	s.chains = []chainSpec{
		{name: pmChainHostports, rules: hostportsRules()},
		{name: pmChainMasq4, rules: masqRules(false)},
		{name: pmChainMasq6, rules: masqRules(true)},
		baseChain(pmChainPrerouting, nftables.ChainTypeNAT, *nftables.ChainHookPrerouting, *nftables.ChainPriorityNATDest, jump()),
		baseChain(pmChainOutput, nftables.ChainTypeNAT, *nftables.ChainHookOutput, *nftables.ChainPriorityNATDest, jump()),
	}
	return s
}

// pmCreate are the flags of a message that creates an object or leaves it
// as it is.
const pmCreate = mdnetlink.Acknowledge | mdnetlink.Create

// pmPostroutingMsgs creates the postrouting chain (or leaves it), flushes
// and refills it, and creates the marker set pmSetRules, in a table whose
// maps and sets exist (portmapTable reconciled).
func pmPostroutingMsgs() []mdnetlink.Message {
	table := mdnetlink.Attribute{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(PortMapTable)}
	msgs := []mdnetlink.Message{
		pmMsg(unix.NFT_MSG_NEWCHAIN, pmCreate, attrs(table,
			mdnetlink.Attribute{Type: unix.NFTA_CHAIN_NAME, Data: cstr(pmChainPostrouting)},
			nested(unix.NFTA_CHAIN_HOOK, attrs(
				mdnetlink.Attribute{Type: unix.NFTA_HOOK_HOOKNUM, Data: be32(unix.NF_INET_POST_ROUTING)},
				mdnetlink.Attribute{Type: unix.NFTA_HOOK_PRIORITY, Data: be32(uint32(prioSrcNAT))},
			)),
			mdnetlink.Attribute{Type: unix.NFTA_CHAIN_POLICY, Data: be32(nfAccept)},
			mdnetlink.Attribute{Type: unix.NFTA_CHAIN_TYPE, Data: cstr("nat")},
		)),
		// Flushed and refilled: an interrupted or older chain heals.
		pmMsg(unix.NFT_MSG_DELRULE, mdnetlink.Acknowledge, attrs(
			mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(PortMapTable)},
			mdnetlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(pmChainPostrouting)},
		)),
	}
	for _, r := range postroutingRules() {
		msgs = append(msgs, pmRuleMsg(pmChainPostrouting, r))
	}
	return append(msgs, pmRulesMark(pmCreate))
}

// pmRuleMsg appends a rule of the expressions r to chain.
func pmRuleMsg(chain string, r [][]byte) mdnetlink.Message {
	var list []mdnetlink.Attribute
	for _, e := range r {
		list = append(list, mdnetlink.Attribute{Type: nftListElemType, Data: e})
	}
	return pmMsg(unix.NFT_MSG_NEWRULE, pmCreate|mdnetlink.Append, attrs(
		mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(PortMapTable)},
		mdnetlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(chain)},
		nested(unix.NFTA_RULE_EXPRESSIONS, attrs(list...)),
	))
}

// pmSetRules is an empty set whose presence says that the chains hold this
// cnibox's rules: every DNAT only to destinations local to the node. A
// table an older cnibox made lacks it (its host IP rules DNAT traffic to
// any address); the first ADD that finds it missing rewrites the rules.
const pmSetRules = "rules-local-dnat"

// pmRulesMark declares the marker set. With pmCreate it creates it (or
// leaves it); with no flags it only asserts it: the kernel leaves an
// existing set as it is and answers ENOENT when it (or the table) is
// missing, which makes the fast path of an ADD on an older table fail as it
// does without a table.
func pmRulesMark(flags mdnetlink.HeaderFlags) mdnetlink.Message {
	return pmMsg(unix.NFT_MSG_NEWSET, flags|mdnetlink.Acknowledge, attrs(
		mdnetlink.Attribute{Type: unix.NFTA_SET_TABLE, Data: cstr(PortMapTable)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_NAME, Data: cstr(pmSetRules)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_FLAGS, Data: be32(0)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_TYPE, Data: be32(nftTypeIPAddr)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_LEN, Data: be32(4)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_ID, Data: be32(pmSetRulesID)},
	))
}

// pmSetRulesID is the marker set's ID in its batch (no other set is made
// there).
const pmSetRulesID = 100

// hostportsRules DNAT only packets to a destination local to the node
// (`fib daddr type local`), the host IP maps' included: an element whose host
// IP is another machine's address (which ADD refuses, but a table written by
// hand or by an older cnibox may hold) must never capture traffic that is
// only passing through, or that the node sends to that machine.
func hostportsRules() []*nftables.Rule {
	fibLocal := []expr.Any{
		&expr.Fib{Register: reg1, ResultADDRTYPE: true, FlagDADDR: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ne32(unix.RTN_LOCAL)},
	}
	loop6 := netip.IPv6Loopback().AsSlice()
	return []*nftables.Rule{
		// fib daddr type local dnat ip to ip daddr . meta l4proto . th dport map @hostip4
		{Exprs: slices.Concat(nfprotoIs(unix.NFPROTO_IPV4), fibLocal, []expr.Any{addrPayload(false, false, reg1), l4protoExpr(reg32at9),
			thDportExpr(reg32at10), pmLookup(pmSetHostIP4, reg1, true), dnatExpr(false)})},
		// fib daddr type local dnat ip to meta l4proto . th dport map @port4
		{Exprs: slices.Concat(nfprotoIs(unix.NFPROTO_IPV4), fibLocal, []expr.Any{l4protoExpr(reg1), thDportExpr(reg32at9),
			pmLookup(pmSetPort4, reg1, true), dnatExpr(false)})},
		// fib daddr type local dnat ip6 to ip6 daddr . meta l4proto . th dport map @hostip6
		{Exprs: slices.Concat(nfprotoIs(unix.NFPROTO_IPV6), fibLocal, []expr.Any{addrPayload(true, false, reg1), l4protoExpr(reg2),
			thDportExpr(reg32at13), pmLookup(pmSetHostIP6, reg1, true), dnatExpr(true)})},
		// ip6 daddr != ::1 fib daddr type local dnat ip6 to meta l4proto . th dport map @port6
		{Exprs: slices.Concat(nfprotoIs(unix.NFPROTO_IPV6), []expr.Any{addrPayload(true, false, reg1),
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: loop6}}, fibLocal,
			[]expr.Any{l4protoExpr(reg1), thDportExpr(reg32at9), pmLookup(pmSetPort6, reg1, true), dnatExpr(true)})},
	}
}

// masqRules masquerade forwarded connections to masqAll pods, from a pod to
// itself and (IPv4) from the node's 127.0.0.0/8.
func masqRules(v6 bool) []*nftables.Rule {
	fam, all, snat, second := byte(unix.NFPROTO_IPV4), pmSetAll4, pmSetSnat4, uint32(reg32at9)
	if v6 {
		fam, all, snat, second = unix.NFPROTO_IPV6, pmSetAll6, pmSetSnat6, reg2
	}
	masq := func() expr.Any { return &expr.Masq{} }
	rules := []*nftables.Rule{
		// ip daddr @masqall4 masquerade
		{Exprs: slices.Concat(nfprotoIs(fam), []expr.Any{addrPayload(v6, false, reg1), pmLookup(all, 0, false), masq()})},
		// ip saddr . ip daddr @snat4 masquerade
		{Exprs: slices.Concat(nfprotoIs(fam), []expr.Any{addrPayload(v6, true, reg1), addrPayload(v6, false, second),
			pmLookup(snat, 0, false), masq()})},
	}
	if !v6 {
		// ip saddr 127.0.0.0/8 ip daddr . ip daddr @snat4 masquerade
		rules = append(rules, &nftables.Rule{Exprs: slices.Concat(nfprotoIs(fam), []expr.Any{addrPayload(false, true, reg1),
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127, 0, 0, 0}},
			addrPayload(false, false, reg1), addrPayload(false, false, second), pmLookup(snat, 0, false), masq()})})
	}
	return rules
}
