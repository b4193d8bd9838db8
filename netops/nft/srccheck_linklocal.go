package nft

import (
	"net/netip"
	"slices"

	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/internal/ifname"
)

// IPv6 link-local addresses in the source address check (issue 60). No
// policy set holds a link-local address, so what a pod sends from or to
// one is judged by no NetworkPolicy: the check lets link-local through for
// neighbour and multicast listener discovery only (chain nd6), and from
// the pod's own link-local address only, which it binds to the port like
// the pod's other addresses. That address is PodLinkLocal(port): the
// veth's creation gives the pod end that one and no other (netops'
// VethIPv6LinkLocal), so the check knows it before the pod is up and a
// DEL knows it from the port's name alone. A pod without an IPv6 address
// has no IPv6 at all (netops' VethIPv6None): nothing IPv6 from its port
// passes but the discovery of the unspecified address (DAD, MLD).

// PodLinkLocal is the link-local address bound to port when the pod has
// an IPv6 address: the one the pod end of its veth has.
func PodLinkLocal(port string) netip.Addr { return ifname.PodLinkLocal(port) }

// srcAddrs are the addresses the check binds to port for the pod's
// addresses addrs: those, unmapped, and with an IPv6 one among them the
// pod's link-local address.
func srcAddrs(port string, addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs)+1)
	v6 := false
	for _, a := range addrs {
		a = a.Unmap()
		v6 = v6 || a.Is6()
		out = append(out, a)
	}
	if ll := PodLinkLocal(port); v6 && !slices.Contains(out, ll) {
		out = append(out, ll)
	}
	return out
}

// srcRulesMark is an empty set in each table of the check with IPv6 rules
// whose presence says that the chains hold this cnibox's rules: link-local
// for discovery only and from the port's own address only. A table an
// older cnibox made lacks it (its rules let any link-local source
// through); the first ADD that finds it missing rewrites the rules
// (ensureSrcSchema) and makes it, in the transaction of its elements.
const srcRulesMark = "rules-linklocal"

// srcMarkMsgs declare the marker set in the tables of kind with IPv6
// rules. With create they make it (or leave it); without, they only
// assert it: the kernel leaves an existing set of the same definition as
// it is and answers ENOENT when it (or its table) is missing, which makes
// the elements' transaction on an older table fail as it does on no
// table.
func srcMarkMsgs(kind SrcCheckKind, create bool) []mdnetlink.Message {
	flags := mdnetlink.Acknowledge
	if create {
		flags |= mdnetlink.Create
	}
	var msgs []mdnetlink.Message
	for _, t := range kind.tables() {
		if !t.v6 {
			continue
		}
		msgs = append(msgs, mdnetlink.Message{
			Header: mdnetlink.Header{
				Type:  mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSET),
				Flags: mdnetlink.Request | flags,
			},
			Data: append(nfgenmsg(byte(t.family), 0), attrs(
				mdnetlink.Attribute{Type: unix.NFTA_SET_TABLE, Data: cstr(SrcCheckTable)},
				mdnetlink.Attribute{Type: unix.NFTA_SET_NAME, Data: cstr(srcRulesMark)},
				mdnetlink.Attribute{Type: unix.NFTA_SET_FLAGS, Data: be32(0)},
				mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_TYPE, Data: be32(nftTypeIPAddr)},
				mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_LEN, Data: be32(4)},
				mdnetlink.Attribute{Type: unix.NFTA_SET_ID, Data: be32(srcRulesMarkID)},
			)...),
		})
	}
	return msgs
}

// srcRulesMarkID is the marker's set ID in its transaction (no other set
// is made by raw messages there).
const srcRulesMarkID = 1
