package nft

import (
	"errors"
	"fmt"

	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Port mappings (the portmap role) live in a table of their own. Every
// mapping and every masqueraded pod address is one element of a map or set;
// the chains and rules are fixed. Adding or deleting a pod's mappings costs
// the same however many pods there are: no rule per pod, and no verdict
// element per pod (a jump in a map element makes the kernel re-validate the
// whole table, walking every such element, on each change).
//
//	table inet cnibox-portmap {
//		# host IP . protocol . host port -> pod IP . pod port
//		map hostip4 { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service }
//		map hostip6 { type ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service }
//		# protocol . host port (any local address) -> pod IP . pod port
//		map port4 { type inet_proto . inet_service : ipv4_addr . inet_service }
//		map port6 { type inet_proto . inet_service : ipv6_addr . inet_service }
//		# pod IP . pod IP: masquerade hairpin (and, IPv4, localhost) connections
//		set snat4 { type ipv4_addr . ipv4_addr }
//		set snat6 { type ipv6_addr . ipv6_addr }
//		# pod IP: masquerade every forwarded connection (masqAll)
//		set masqall4 { type ipv4_addr }
//		set masqall6 { type ipv6_addr }
//		# empty: says the chains hold these rules (an older table lacks it)
//		set rules-local-dnat { type ipv4_addr }
//
//		chain prerouting { type nat hook prerouting priority dstnat; policy accept; jump hostports }
//		chain output { type nat hook output priority dstnat; policy accept; jump hostports }
//		chain hostports {
//			# only destinations local to the node, whatever a map holds
//			fib daddr type local dnat ip to ip daddr . meta l4proto . th dport map @hostip4
//			fib daddr type local dnat ip to meta l4proto . th dport map @port4
//			fib daddr type local dnat ip6 to ip6 daddr . meta l4proto . th dport map @hostip6
//			ip6 daddr != ::1 fib daddr type local dnat ip6 to meta l4proto . th dport map @port6
//		}
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			# connections that hostports forwarded: their original destination is a key
//			ct status dnat meta l4proto . ct original proto-dst @port4 jump masq4
//			ct status dnat ct original ip daddr . meta l4proto . ct original proto-dst @hostip4 jump masq4
//			ct status dnat meta l4proto . ct original proto-dst @port6 jump masq6
//			ct status dnat ct original ip6 daddr . meta l4proto . ct original proto-dst @hostip6 jump masq6
//		}
//		chain masq4 {
//			ip daddr @masqall4 masquerade
//			ip saddr . ip daddr @snat4 masquerade                        # the pod to itself
//			ip saddr 127.0.0.0/8 ip daddr . ip daddr @snat4 masquerade   # the node's localhost
//		}
//		chain masq6 {
//			ip6 daddr @masqall6 masquerade
//			ip6 saddr . ip6 daddr @snat6 masquerade
//		}
//	}
//
// Each element's comment names its owner (the portmap role writes network,
// container ID and ifname there), which PortMapEntries and LookupPortMaps
// read back.
const (
	// PortMapTable is the name of the inet table of the port mappings.
	PortMapTable = "cnibox-portmap"

	pmSetHostIP4 = "hostip4"
	pmSetHostIP6 = "hostip6"
	pmSetPort4   = "port4"
	pmSetPort6   = "port6"
	pmSetSnat4   = "snat4"
	pmSetSnat6   = "snat6"
	pmSetAll4    = "masqall4"
	pmSetAll6    = "masqall6"

	pmChainPrerouting  = "prerouting"
	pmChainOutput      = "output"
	pmChainPostrouting = "postrouting"
	pmChainHostports   = "hostports"
	pmChainMasq4       = "masq4"
	pmChainMasq6       = "masq6"

	// pmMaxOwner bounds an element comment (the kernel keeps at most 256
	// bytes of user data, with a 2-byte header and a NUL).
	pmMaxOwner = 250
)

// EnsurePortMaps adds the mappings and masquerade entries of p, owned by
// p.Owner, in one nftables transaction. For the first pod of the node that
// transaction fails; the core then makes the table, its maps, sets and
// chains (portmapTable), and a last transaction writes the postrouting
// chain and the marker with the elements (portmap_schema.go). An element whose key is taken by other data or
// another owner is replaced (the newest attachment of a host port wins, as
// with the reference plugin); replaced returns those elements as they were,
// grouped by owner, so the caller can update its records.
func (h *Handle) EnsurePortMaps(p PortMaps) (replaced []PortMaps, err error) {
	h.waitExpired() // an element this handle removed must be gone before a key is added again
	elems, err := p.elems()
	if err != nil {
		return nil, fmt.Errorf("ensure port mappings: %w", err)
	}
	if len(elems) == 0 {
		return nil, nil
	}
	if _, err := h.nftConn(); err != nil {
		return nil, fmt.Errorf("ensure port mappings in %s: %w", h.where(), err)
	}
	replaced, err = h.ensurePortMaps(elems)
	if err != nil {
		return nil, fmt.Errorf("ensure port mappings of %q in %s: %w", p.Owner, h.where(), classify(err))
	}
	return replaced, nil
}

func (h *Handle) ensurePortMaps(elems []pmElem) ([]PortMaps, error) {
	// Fast path: the table exists with this cnibox's rules (its marker set
	// does), no key is taken.
	add := pmElemMsgs(unix.NFT_MSG_NEWSETELEM, mdExcl, elems, true)
	err := h.commitRaw(append([]mdnetlink.Message{pmRulesMark(0)}, add...)...)
	if errors.Is(err, unix.ENOENT) {
		// No table, or an older cnibox's: (re)write it, then the
		// postrouting chain and the marker with the elements.
		if _, err := h.reconcile(portmapTable()); err != nil {
			return nil, fmt.Errorf("table inet %s: %w", PortMapTable, err)
		}
		err = h.commitRaw(append(pmPostroutingMsgs(), add...)...)
		if errors.Is(err, unix.EEXIST) {
			// A key is taken (handled below): the chain and the marker on
			// their own.
			if err := h.commitRaw(pmPostroutingMsgs()...); err != nil {
				return nil, fmt.Errorf("rewrite the rules of table inet %s: %w", PortMapTable, err)
			}
		}
	}
	const tries = 3
	for try := 0; errors.Is(err, unix.EEXIST) && try < tries; try++ {
		// Some keys exist: keep those that are ours already, replace the rest.
		var have []pmElem
		have, err = h.pmLookup(elems)
		if err != nil {
			return nil, err
		}
		found := map[string]pmElem{}
		for _, e := range have {
			found[e.id()] = e
		}
		var add, del, old []pmElem
		for _, e := range elems {
			f, ok := found[e.id()]
			switch {
			case !ok:
				add = append(add, e)
			case f.same(e) && f.owner == e.owner:
			default:
				del = append(del, f)
				add = append(add, e)
				if f.owner != e.owner {
					old = append(old, f)
				}
			}
		}
		msgs := pmElemMsgs(unix.NFT_MSG_DELSETELEM, 0, del, false)
		msgs = append(msgs, pmElemMsgs(unix.NFT_MSG_NEWSETELEM, mdExcl, add, true)...)
		if err = h.commitRaw(msgs...); err == nil {
			return groupByOwner(old), nil
		}
		if errors.Is(err, unix.ENOENT) && len(del) > 0 {
			err = unix.EEXIST // deleted meanwhile: look again
		}
	}
	return nil, err
}

// DeletePortMaps removes the elements of every p (of two with the same key,
// the first), in one nftables transaction, but only where the table still
// holds the same data: a key that another attachment took over since (same
// host port, other pod address) stays. Missing elements and a missing table
// are not an error. Each element is re-added with its data and deleted in
// the same transaction, so the kernel's own comparison of the data guards
// the delete and nothing needs to be looked up first (like a destroy, which
// would not check the data). Where the kernel can, the elements expire
// instead (pmRemove), within a tick: Close waits until they have, so a
// caller's work before Close (a portmap DEL's record update) overlaps the
// tick; after Close nothing sees them. Likewise the nftables connection
// stays open until Close, so the kernel's cleanup of a deletion runs
// meanwhile (see perf-notes).
func (h *Handle) DeletePortMaps(ps ...PortMaps) error {
	h.waitExpired() // see EnsurePortMaps
	var elems []pmElem
	seen := map[string]bool{}
	for _, p := range ps {
		es, err := p.elems()
		if err != nil {
			return fmt.Errorf("delete port mappings: %w", err)
		}
		for _, e := range es {
			// The same key twice (a dump and a record of it, say): the first wins.
			if !seen[e.id()] {
				seen[e.id()] = true
				elems = append(elems, e)
			}
		}
	}
	if len(elems) == 0 {
		return nil
	}
	if _, err := h.nftConn(); err != nil {
		return fmt.Errorf("delete port mappings in %s: %w", h.where(), err)
	}
	err := h.pmRemove(elems)
	if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
		// A key holds other data now, or the table (or a chain) is gone:
		// delete what is still ours, after looking.
		err = h.deleteExisting(elems)
	}
	if err != nil {
		return fmt.Errorf("delete port mappings in %s: %w", h.where(), err)
	}
	return nil
}

// deleteExisting deletes the elements that the table holds with the same
// data and, where both have one, the same owner.
func (h *Handle) deleteExisting(elems []pmElem) error {
	have, err := h.pmLookup(elems)
	if err != nil {
		return err
	}
	found := map[string]pmElem{}
	for _, e := range have {
		found[e.id()] = e
	}
	var del []pmElem
	for _, e := range elems {
		f, ok := found[e.id()]
		if ok && f.same(e) && (e.owner == "" || f.owner == "" || e.owner == f.owner) {
			del = append(del, f)
		}
	}
	return h.pmRemove(del)
}

// LookupPortMaps returns the elements that the table holds for the keys of
// q (host IP, protocol, host port and the family of PodIP for mappings; the
// pod address for masquerade entries, with or without All), grouped by
// owner. PodPort, All and q.Owner are ignored. Each key is one single-element get, so the
// cost does not depend on the number of pods.
func (h *Handle) LookupPortMaps(q PortMaps) ([]PortMaps, error) {
	h.waitExpired() // see EnsurePortMaps
	var keys []pmElem
	for _, m := range q.Mappings {
		m.PodPort = 1 // not part of the key
		e, err := mappingElem(m, "")
		if err != nil {
			return nil, fmt.Errorf("look up port mappings: %w", err)
		}
		keys = append(keys, e)
	}
	for _, m := range q.Masq {
		for _, all := range []bool{false, true} {
			e, err := masqElem(PortMasq{PodIP: m.PodIP, All: all}, "")
			if err != nil {
				return nil, fmt.Errorf("look up port mappings: %w", err)
			}
			keys = append(keys, e)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if _, err := h.nftConn(); err != nil {
		return nil, fmt.Errorf("look up port mappings in %s: %w", h.where(), err)
	}
	found, err := h.pmLookup(keys)
	if err != nil {
		return nil, fmt.Errorf("look up port mappings in %s: %w", h.where(), err)
	}
	return groupByOwner(found), nil
}

// PortMapEntries returns every element of the portmap table, grouped by
// owner (a dump of each map: for GC and the CLI, not for a pod's ADD or DEL).
// A missing table is no error.
func (h *Handle) PortMapEntries() ([]PortMaps, error) {
	h.waitExpired() // see EnsurePortMaps
	if _, err := h.nftConn(); err != nil {
		return nil, fmt.Errorf("list port mappings in %s: %w", h.where(), err)
	}
	var all []pmElem
	for _, set := range pmSetNames {
		elems, err := h.pmDump(set)
		if err != nil {
			return nil, fmt.Errorf("list port mappings in %s: %w", h.where(), err)
		}
		all = append(all, elems...)
	}
	return groupByOwner(all), nil
}
