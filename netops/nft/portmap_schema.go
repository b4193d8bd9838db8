package nft

import (
	"net/netip"

	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The portmap table's schema: its maps, sets, chains and rules.

// pmSchemaMsgs creates the table, its maps, sets and chains and (re)writes
// the rules of every chain (pmRulesMsgs). Every message is idempotent, so
// concurrent first ADDs end in the same table, and a damaged table heals.
func pmSchemaMsgs() []mdnetlink.Message {
	msgs := []mdnetlink.Message{pmTableMsg()}
	for _, s := range pmSets {
		// Every set takes timeouts: a removal sets a 1 ms timeout instead of
		// deleting (pmExpireMsgs).
		flags := uint32(nftSetTimeout)
		if s.dataType != 0 {
			flags |= nftSetMap
		}
		as := []mdnetlink.Attribute{
			{Type: unix.NFTA_SET_TABLE, Data: cstr(PortMapTable)},
			{Type: unix.NFTA_SET_NAME, Data: cstr(s.name)},
			{Type: unix.NFTA_SET_FLAGS, Data: be32(flags)},
			{Type: unix.NFTA_SET_KEY_TYPE, Data: be32(s.keyType)},
			{Type: unix.NFTA_SET_KEY_LEN, Data: be32(s.keyLen)},
		}
		if s.dataType != 0 {
			as = append(as,
				mdnetlink.Attribute{Type: unix.NFTA_SET_DATA_TYPE, Data: be32(s.dataType)},
				mdnetlink.Attribute{Type: unix.NFTA_SET_DATA_LEN, Data: be32(s.dataLen)})
		}
		as = append(as, mdnetlink.Attribute{Type: unix.NFTA_SET_ID, Data: be32(s.id)})
		msgs = append(msgs, pmMsg(unix.NFT_MSG_NEWSET, pmCreate, attrs(as...)))
	}

	return append(msgs, pmRulesMsgs()...)
}

// pmCreate are the flags of a message that creates an object or leaves it
// as it is.
const pmCreate = mdnetlink.Acknowledge | mdnetlink.Create

func pmTableMsg() mdnetlink.Message {
	table := mdnetlink.Attribute{Type: unix.NFTA_TABLE_NAME, Data: cstr(PortMapTable)}
	return pmMsg(unix.NFT_MSG_NEWTABLE, pmCreate, attrs(table))
}

// pmRulesMsgs creates the chains, flushes and refills them and creates the
// marker set pmSetRules, in a table whose maps and sets exist (or are
// created earlier in the same batch).
func pmRulesMsgs() []mdnetlink.Message {
	const create = pmCreate
	var msgs []mdnetlink.Message
	type chain struct {
		name  string
		hook  uint32
		prio  int32
		base  bool
		rules [][][]byte
	}
	chains := []chain{
		{name: pmChainHostports, rules: hostportsRules()},
		{name: pmChainMasq4, rules: masqRules(false)},
		{name: pmChainMasq6, rules: masqRules(true)},
		{name: pmChainPrerouting, base: true, hook: unix.NF_INET_PRE_ROUTING, prio: prioDstNAT,
			rules: [][][]byte{{mx(&expr.Verdict{Kind: expr.VerdictJump, Chain: pmChainHostports})}}},
		{name: pmChainOutput, base: true, hook: unix.NF_INET_LOCAL_OUT, prio: prioDstNAT,
			rules: [][][]byte{{mx(&expr.Verdict{Kind: expr.VerdictJump, Chain: pmChainHostports})}}},
		{name: pmChainPostrouting, base: true, hook: unix.NF_INET_POST_ROUTING, prio: prioSrcNAT, rules: postroutingRules()},
	}
	for _, c := range chains {
		as := []mdnetlink.Attribute{
			{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(PortMapTable)},
			{Type: unix.NFTA_CHAIN_NAME, Data: cstr(c.name)},
		}
		if c.base {
			as = append(as,
				nested(unix.NFTA_CHAIN_HOOK, attrs(
					mdnetlink.Attribute{Type: unix.NFTA_HOOK_HOOKNUM, Data: be32(c.hook)},
					mdnetlink.Attribute{Type: unix.NFTA_HOOK_PRIORITY, Data: be32(uint32(c.prio))},
				)),
				mdnetlink.Attribute{Type: unix.NFTA_CHAIN_POLICY, Data: be32(nfAccept)},
				mdnetlink.Attribute{Type: unix.NFTA_CHAIN_TYPE, Data: cstr("nat")},
			)
		}
		msgs = append(msgs, pmMsg(unix.NFT_MSG_NEWCHAIN, create, attrs(as...)))
	}
	// Flush and refill every chain: an interrupted or older table heals.
	for _, c := range chains {
		msgs = append(msgs, pmMsg(unix.NFT_MSG_DELRULE, mdnetlink.Acknowledge, attrs(
			mdnetlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(PortMapTable)},
			mdnetlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(c.name)},
		)))
		for _, r := range c.rules {
			msgs = append(msgs, pmRuleMsg(c.name, r))
		}
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

// pmSetRulesID follows the ids of pmSets.
const pmSetRulesID = 100

// hostportsRules DNAT only packets to a destination local to the node
// (`fib daddr type local`), the host IP maps' included: an element whose host
// IP is another machine's address (which ADD refuses, but a table written by
// hand or by an older cnibox may hold) must never capture traffic that is
// only passing through, or that the node sends to that machine.
func hostportsRules() [][][]byte {
	loop6 := netip.IPv6Loopback().AsSlice()
	return [][][]byte{
		// fib daddr type local dnat ip to ip daddr . meta l4proto . th dport map @hostip4
		join(nfproto(unix.NFPROTO_IPV4), fibLocal(), [][]byte{ipField(false, false), l4proto(reg32at9), thDport(reg32at10),
			lookup(pmSetHostIP4, reg1, true), dnat(false)}),
		// fib daddr type local dnat ip to meta l4proto . th dport map @port4
		join(nfproto(unix.NFPROTO_IPV4), fibLocal(), [][]byte{l4proto(reg1), thDport(reg32at9),
			lookup(pmSetPort4, reg1, true), dnat(false)}),
		// fib daddr type local dnat ip6 to ip6 daddr . meta l4proto . th dport map @hostip6
		join(nfproto(unix.NFPROTO_IPV6), fibLocal(), [][]byte{ipField(true, false), l4proto(reg2), thDport(reg32at13),
			lookup(pmSetHostIP6, reg1, true), dnat(true)}),
		// ip6 daddr != ::1 fib daddr type local dnat ip6 to meta l4proto . th dport map @port6
		join(nfproto(unix.NFPROTO_IPV6), [][]byte{ipField(true, false),
			mx(&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: loop6})}, fibLocal(),
			[][]byte{l4proto(reg1), thDport(reg32at9), lookup(pmSetPort6, reg1, true), dnat(true)}),
	}
}
