package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/netops/internal/ifname"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The source address check (a role's "ipspoofchk"): what a pod sends
// through the host end of its veth must carry one of the pod's addresses.
// A bridge port is checked in a bridge-family table, on the bridge's
// prerouting hook, which every frame entering the bridge from a port
// crosses, whether it is bridged to another port or meant for the node;
// a routed veth (ptp, azure-vnet's transparent mode) in an inet table on
// prerouting, and its ARP in an arp table on input:
//
//	table bridge cnibox-src {       # and table inet cnibox-src (no arp part)
//		set ports { type ifname }                 # the checked ports
//		set addr4 { type ifname . ipv4_addr }     # (port, pod address)
//		set addr6 { type ifname . ipv6_addr }
//		chain prerouting {
//			type filter hook prerouting priority -300; policy accept;
//			meta protocol ip iifname . ip saddr @addr4 return   # most packets: one lookup
//			iifname @ports jump check
//		}
//		chain check {
//			meta protocol ip goto check4
//			meta protocol arp goto checkarp
//			meta protocol ip6 goto check6
//			meta protocol { 8021q, 8021ad } drop    # a second VLAN tag
//		}
//		chain check4 {
//			iifname . ip saddr @addr4 return
//			ip saddr 0.0.0.0 udp sport 68 udp dport 67 return   # a DHCP client
//			drop
//		}
//		chain checkarp {
//			arp ptype ip arp hlen 6 arp plen 4 iifname . arp saddr ip @addr4 return
//			arp ptype ip arp hlen 6 arp plen 4 arp saddr ip 0.0.0.0 return   # a probe
//			drop
//		}
//		chain check6 {
//			icmpv6 type { nd-router-advert, nd-redirect } drop
//			icmpv6 type nd-neighbor-advert jump na6
//			ip6 saddr fe80::/10 jump nd6   # link-local: discovery only,
//			ip6 daddr fe80::/10 jump nd6   # from the port's own (addr6)
//			iifname . ip6 saddr @addr6 return
//			ip6 saddr :: goto nd6          # DAD, MLD before a link-local
//			drop
//		}
//		chain nd6 {            # ND and MLD go on, the rest is dropped
//			icmpv6 type { 130-133, 135-136, 143 } return
//			drop
//		}
//		chain na6 {            # the target of a neighbour advertisement
//			iifname . @th,64,128 @addr6 return
//			drop
//		}
//		set rules-linklocal { type ipv4_addr }   # empty: these rules (srccheck_linklocal.go)
//	}
//	table arp cnibox-src { set ports, addr4; chain input { iifname @ports jump checkarp } ... }
//
// A pod costs one element in ports and one per address (its link-local
// address one more when it has IPv6), added in one transaction; the rules
// change only with cnibox's version (srcRulesMark). A port without an
// element is not checked. Other protocols (LLDP, ...) pass: they carry no
// IP source.
const (
	// SrcCheckTable is the name of the tables of the source address check.
	SrcCheckTable = "cnibox-src"
	srcPorts      = "ports"
	srcAddr4      = "addr4"
	srcAddr6      = "addr6"
)

// SrcCheckKind says where a port is checked.
type SrcCheckKind uint8

const (
	// SrcCheckBridge: the port is a bridge port (table bridge cnibox-src).
	SrcCheckBridge SrcCheckKind = iota
	// SrcCheckRouted: the port is a routed veth (tables inet and arp
	// cnibox-src).
	SrcCheckRouted
)

// srcTable is one table of the check: its family and whether it has the
// IPv6 set.
type srcTable struct {
	family nftables.TableFamily
	v6     bool
}

// tables are the tables that check a port of kind k.
func (k SrcCheckKind) tables() []srcTable {
	if k == SrcCheckRouted {
		return []srcTable{{nftables.TableFamilyINet, true}, {nftables.TableFamilyARP, false}}
	}
	return []srcTable{{nftables.TableFamilyBridge, true}}
}

// EnsureSourceCheck makes the host end port drop what the pod sends with a
// source address other than addrs (kind says where port is), in one
// transaction: one element per address and one for the port; with an IPv6
// address among addrs, one for the pod's link-local address too
// (PodLinkLocal(port), srccheck_linklocal.go). Called again it adds
// addresses; no addresses is nothing to check.
func (h *Handle) EnsureSourceCheck(kind SrcCheckKind, port string, addrs []netip.Addr) error {
	if err := ifname.Check("ensure source address check", port); err != nil {
		return err
	}
	if len(addrs) == 0 {
		return nil
	}
	if _, err := h.nftConn(); err != nil {
		return err
	}
	msgs := srcElemMsgs(kind, port, addrs, unix.NFT_MSG_NEWSETELEM, mdnetlink.Create|mdnetlink.Acknowledge, true)
	err := h.commitRaw(append(srcMarkMsgs(kind, false), msgs...)...)
	if errors.Is(err, unix.ENOENT) {
		// The first port of its kind, or tables an older cnibox made
		// (srcRulesMark): the tables and rules, then the marker with the
		// elements.
		if err = h.ensureSrcSchema(kind); err == nil {
			err = h.commitRaw(append(srcMarkMsgs(kind, true), msgs...)...)
		}
	}
	if err != nil {
		return fmt.Errorf("ensure source address check of %s (%v) in %s: %w", port, addrs, h.where(), classify(err))
	}
	return nil
}

// srcKey is the key of port's element in an address set.
func srcKey(port string, a netip.Addr) []byte { return append(ifnameKey(port), a.AsSlice()...) }

// srcElemMsgs are the element messages (msgType) of port and addrs in the
// tables of kind (their keys srcKeyGroups'); withPort adds port's element
// of the ports sets.
func srcElemMsgs(kind SrcCheckKind, port string, addrs []netip.Addr, msgType int, flags mdnetlink.HeaderFlags, withPort bool) []mdnetlink.Message {
	var msgs []mdnetlink.Message
	for _, t := range kind.tables() {
		groups, _ := srcKeyGroups(t, port, addrs)
		for _, g := range groups {
			if len(g.keys) == 0 || (g.set == srcPorts && !withPort) {
				continue
			}
			elems := make([]nftElem, len(g.keys))
			for i, k := range g.keys {
				elems[i].key = k
			}
			msgs = append(msgs, srcMsg(t.family, g.set, msgType, flags, elems))
		}
	}
	return msgs
}

// srcMsg is an element message for set of the check's table of family.
func srcMsg(family nftables.TableFamily, set string, msgType int, flags mdnetlink.HeaderFlags, elems []nftElem) mdnetlink.Message {
	return familyElemMsg(family, SrcCheckTable, set, msgType, flags, elems, false)
}

// ensureSrcSchema reconciles the tables of kind (srcTableSpec), in one
// transaction: concurrent first ADDs end in the same tables (chains
// flushed and their rules written again, sets of the same definition),
// and the elements stay.
func (h *Handle) ensureSrcSchema(kind SrcCheckKind) error {
	var specs []*tableSpec
	for _, st := range kind.tables() {
		specs = append(specs, srcTableSpec(st))
	}
	_, err := h.reconcile(specs...)
	return err
}

// srcTableSpec is one table of the check: its sets, whose elements are the
// ports', and its chains (srcChains). The marker set is not the spec's: it
// is made in the transaction of the first elements (srcMarkMsgs).
func srcTableSpec(st srcTable) *tableSpec {
	sets := []setSpec{
		{set: &nftables.Set{Name: srcPorts, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian}, kept: true}, // host order: nft then shows the names
		{set: &nftables.Set{Name: srcAddr4, KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr), Concatenation: true}, kept: true},
	}
	if st.v6 {
		sets = append(sets, setSpec{set: &nftables.Set{Name: srcAddr6, KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIP6Addr), Concatenation: true}, kept: true})
	}
	s := &tableSpec{table: &nftables.Table{Name: SrcCheckTable, Family: st.family}, what: "the source address check", sets: sets}
	for _, ch := range srcChains(st) {
		cs := chainSpec{name: ch.name, hook: ch.hook, typ: nftables.ChainTypeFilter, prio: ch.prio}
		for _, r := range ch.rules {
			cs.rules = append(cs.rules, &nftables.Rule{Exprs: r})
		}
		s.chains = append(s.chains, cs)
	}
	return s
}
