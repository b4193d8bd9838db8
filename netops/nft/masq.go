package nft

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The masquerade rules live in a table of their own:
//
//	table inet cnibox {
//		map masq4 { type ipv4_addr : verdict }  # pod IP -> jump m-<hash>
//		map masq6 { type ipv6_addr : verdict }
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip saddr vmap @masq4
//			ip6 saddr vmap @masq6
//		}
//		chain m-<hash> {   # one per masqueraded (network, subnet)
//			ip daddr 10.1.0.0/24 return
//			ip daddr 224.0.0.0/4 return
//			masquerade
//		}
//	}
//
// A pod costs one map element, whatever the number of pods: adding or
// deleting it is flat. Each element's comment is "<subnet> <network>", which
// MasqEntries reads back.
const (
	// MasqTable is the name of the nftables tables cnibox owns: "inet
	// cnibox" (masquerade) and "bridge cnibox" (MAC spoofing check).
	MasqTable     = "cnibox"
	masqBaseChain = "postrouting"
	masqMap4      = "masq4"
	masqMap6      = "masq6"
)

// MasqEntry is one masqueraded pod address.
type MasqEntry struct {
	PodIP   netip.Addr
	Subnet  netip.Prefix // traffic to the subnet is not masqueraded
	Network string       // the CNI network the pod address belongs to
}

// MasqChain returns the name of the chain that masquerades traffic of
// network's subnet, "m-" and 16 hex digits of a hash of both.
func MasqChain(network string, subnet netip.Prefix) string {
	sum := sha256.Sum256([]byte(network + "\x00" + subnet.Masked().String()))
	return "m-" + hex.EncodeToString(sum[:8])
}

// EnsureMasq masquerades traffic from each pod address in ips (an address
// with its subnet's prefix length, e.g. 10.1.0.5/24) to destinations outside
// the subnet and outside multicast. It adds one map element per address in
// one nftables transaction. For the first pod of a subnet that transaction
// fails (nothing to jump to) and a second one creates the table, maps and
// the subnet's chain with the elements. An address already mapped to another
// chain is moved to this one.
func (h *Handle) EnsureMasq(network string, ips []netip.Prefix) error {
	if network == "" {
		return fmt.Errorf("ensure masquerade: empty network name")
	}
	if len(ips) == 0 {
		return nil
	}
	err := h.ensureMasq(network, ips)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY) {
		// An address is mapped to another network's chain (a leftover of a
		// pod that was not deleted): drop those elements and add again.
		addrs := make([]netip.Addr, len(ips))
		for i, p := range ips {
			addrs[i] = p.Addr()
		}
		if err = h.DeleteMasq(addrs); err == nil {
			err = h.ensureMasq(network, ips)
		}
	}
	if err != nil {
		return fmt.Errorf("ensure masquerade of %v (network %q) in %s: %w", ips, network, h.where(), classify(err))
	}
	return nil
}

func (h *Handle) ensureMasq(network string, ips []netip.Prefix) error {
	type subnetChain struct {
		subnet netip.Prefix
		name   string
	}
	var (
		chains []subnetChain
		elems4 []nftables.SetElement
		elems6 []nftables.SetElement
	)
	seen := map[string]bool{}
	for _, p := range ips {
		if !p.IsValid() {
			return fmt.Errorf("invalid pod address %v", p)
		}
		a := p.Addr().Unmap()
		if p.Bits() > a.BitLen() {
			return fmt.Errorf("invalid pod address %v", p)
		}
		subnet := netip.PrefixFrom(a, p.Bits()).Masked()
		name := MasqChain(network, subnet)
		if !seen[name] {
			seen[name] = true
			chains = append(chains, subnetChain{subnet, name})
		}
		comment := subnet.String() + " " + network
		if len(comment) > 200 {
			return fmt.Errorf("network name %q too long", network)
		}
		e := nftables.SetElement{
			Key:         a.AsSlice(),
			VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: name},
			Comment:     comment,
		}
		if a.Is4() {
			elems4 = append(elems4, e)
		} else {
			elems6 = append(elems6, e)
		}
	}

	t, err := h.begin()
	if err != nil {
		return err
	}
	c := t.conn()
	_, set4, set6 := masqObjects()
	addElems := func() error {
		if len(elems4) > 0 {
			if err := c.SetAddElements(set4, elems4); err != nil {
				return err
			}
		}
		if len(elems6) > 0 {
			if err := c.SetAddElements(set6, elems6); err != nil {
				return err
			}
		}
		return nil
	}

	// Fast path, for every pod but the first of a subnet: the maps and the
	// subnet chain exist, add the elements. The kernel answers ENOENT when
	// the table, a map or a chain is missing, and rolls back.
	if err := addElems(); err != nil {
		return err
	}
	if err := t.commit(); !errors.Is(err, unix.ENOENT) {
		return err
	}

	// The first pod of a subnet: the table, the maps and this network's
	// subnet chains, with the elements, in one transaction.
	spec := masqTable(elems4, elems6)
	for _, sc := range chains {
		spec.chains = append(spec.chains, masqSubnetChain(sc.name, sc.subnet))
	}
	_, err = h.reconcile(spec)
	return err
}

// masqTable is cnibox's part of table inet cnibox: the maps, whose
// elements are the pods' (elems4 and elems6 are added), and the base
// chain; masqSubnetChain adds a subnet's chain.
func masqTable(elems4, elems6 []nftables.SetElement) *tableSpec {
	table, set4, set6 := masqObjects()
	return &tableSpec{table: table, what: "the masquerade",
		sets: []setSpec{{set: set4, elems: elems4, kept: true}, {set: set6, elems: elems6, kept: true}},
		chains: []chainSpec{baseChain(masqBaseChain, nftables.ChainTypeNAT, *nftables.ChainHookPostrouting, *nftables.ChainPriorityNATSource,
			[]*nftables.Rule{{Exprs: saddrVmap(false, set4)}, {Exprs: saddrVmap(true, set6)}})},
	}
}

// masqSubnetChain is the chain called name that masquerades traffic from
// subnet's pods to outside it and outside multicast.
func masqSubnetChain(name string, subnet netip.Prefix) chainSpec {
	mcast := netip.MustParsePrefix("224.0.0.0/4")
	if subnet.Addr().Is6() {
		mcast = netip.MustParsePrefix("ff00::/8")
	}
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	return chainSpec{name: name, rules: []*nftables.Rule{
		{Exprs: append(matchPrefix(false, subnet, false), ret)},
		{Exprs: append(matchPrefix(false, mcast, false), ret)},
		{Exprs: []expr.Any{&expr.Masq{}}},
	}}
}

// DeleteMasq removes the map elements of the pod addresses ips in one
// nftables transaction. Addresses without an element, and a missing table,
// are not an error. The subnet chains stay. The nftables connection stays
// open until Close, so a caller can delete the pod's veth first and hide the
// kernel's cleanup wait behind it.
func (h *Handle) DeleteMasq(ips []netip.Addr) error {
	var keys4, keys6 [][]byte
	for _, a := range ips {
		if !a.IsValid() {
			return fmt.Errorf("delete masquerade: invalid address %v", a)
		}
		a = a.Unmap()
		if a.Is4() {
			keys4 = append(keys4, a.AsSlice())
		} else {
			keys6 = append(keys6, a.AsSlice())
		}
	}
	if len(keys4)+len(keys6) == 0 {
		return nil
	}
	if _, err := h.nftConn(); err != nil {
		return fmt.Errorf("delete masquerade of %v in %s: %w", ips, h.where(), err)
	}
	groups := []setKeys{{masqMap4, keys4}, {masqMap6, keys6}}
	if st := stateOf[masqState](h); !st.noExpiry {
		// Expired, not deleted: a deletion leaves destroy work in the
		// kernel that the release of any nftables socket then waits for
		// while it holds the namespace's nftables mutex, so concurrent
		// DELs would queue behind RCU grace periods (perf-notes; see also
		// pmExpireMsgs).
		_, done, err := h.expireElems(nftables.TableFamilyINet, MasqTable, &st.noExpiry, groups...)
		if err != nil {
			return fmt.Errorf("delete masquerade of %v in %s: %w", ips, h.where(), err)
		}
		if done {
			return nil
		}
	}
	err := h.destroyElems(keys4, keys6)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		// The table or a map is missing (DESTROYSETELEM ignores missing
		// elements only), or the kernel predates DESTROYSETELEM: delete
		// the elements that exist.
		_, err = h.delPresentElems(nftables.TableFamilyINet, MasqTable, groups...)
	}
	if err != nil {
		return fmt.Errorf("delete masquerade of %v in %s: %w", ips, h.where(), err)
	}
	return nil
}

// masqState is what the masquerade learned on a Handle's connection:
// noExpiry, its elements are deleted, not expired (the maps lack the
// timeout flag, or the kernel cannot update a timeout).
type masqState struct{ noExpiry bool }

// expiringElem is an element that expireElems or pmRemove gave a timeout
// (family: its table's, inet when unspecified).
type expiringElem struct {
	family     nftables.TableFamily
	table, set string
	key        []byte
}

// waitExpired returns once the elements given a timeout have expired, so
// that nothing sees them after the call. Close runs it: a bridge DEL's veth
// delete, a portmap DEL's record update, take longer than that or part of
// it, so the tick is not waited on its own. Whatever reads or adds elements
// of the same keys on this handle runs it first.
func (h *Handle) waitExpired() {
	for _, e := range h.expiring {
		h.waitElemGone(e)
	}
	h.expiring = nil
}

// destroyElems deletes the keys from the maps with NFT_MSG_DESTROYSETELEM,
// which ignores missing elements, in one batch.
func (h *Handle) destroyElems(keys4, keys6 [][]byte) error {
	var msgs []mdnetlink.Message
	if len(keys4) > 0 {
		msgs = append(msgs, h.elemMsg(nftMsgDestroySetElem, mdnetlink.Acknowledge, masqMap4, keys4))
	}
	if len(keys6) > 0 {
		msgs = append(msgs, h.elemMsg(nftMsgDestroySetElem, mdnetlink.Acknowledge, masqMap6, keys6))
	}
	return h.commitRaw(msgs...)
}

// MasqEntries returns the masqueraded pod addresses. An entry whose element
// has no cnibox comment has a zero Subnet and an empty Network.
func (h *Handle) MasqEntries() ([]MasqEntry, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, fmt.Errorf("list masquerade entries in %s: %w", h.where(), err)
	}
	_, set4, set6 := masqObjects()
	var out []MasqEntry
	for _, s := range []*nftables.Set{set4, set6} {
		ok, err := h.nftSetExists(unix.NFPROTO_INET, MasqTable, s.Name)
		if err != nil {
			return nil, fmt.Errorf("list masquerade entries in %s: %w", h.where(), err)
		}
		if !ok {
			continue
		}
		elems, err := consistently(h, func() ([]nftables.SetElement, error) { return noRepeats(h.nft.GetSetElements(s)) })
		if err != nil {
			return nil, fmt.Errorf("list masquerade entries in %s: %w", h.where(), err)
		}
		for _, e := range elems {
			a, ok := netip.AddrFromSlice(e.Key)
			if !ok {
				continue
			}
			me := MasqEntry{PodIP: a}
			if subnet, network, ok := strings.Cut(e.Comment, " "); ok {
				if p, err := netip.ParsePrefix(subnet); err == nil {
					me.Subnet, me.Network = p, network
				}
			}
			out = append(out, me)
		}
	}
	return out, nil
}

// HasMasq reports whether the pod address ip has its masquerade element,
// with a get of that one element. A check must not dump the maps for it: a
// dump that other processes' adds and deletes overlap can leave an element
// out (a CHECK in TestStorm reported a pod's entry missing while it was
// there; TestHasMasqUnderChurn).
func (h *Handle) HasMasq(ip netip.Addr) (bool, error) {
	if !ip.IsValid() {
		return false, fmt.Errorf("masquerade entry: invalid address %v", ip)
	}
	if _, err := h.nftConn(); err != nil {
		return false, fmt.Errorf("masquerade entry of %s in %s: %w", ip, h.where(), err)
	}
	ip = ip.Unmap()
	set := masqMap4
	if ip.Is6() {
		set = masqMap6
	}
	msgs, err := h.getElem(MasqTable, set, ip.AsSlice())
	if errors.Is(err, unix.ENOENT) {
		return false, nil // no element, map or table
	}
	if err != nil {
		return false, fmt.Errorf("masquerade entry of %s in %s: %w", ip, h.where(), err)
	}
	for _, m := range msgs {
		_, es, err := parseNftElems(m.Data)
		if err != nil {
			return false, fmt.Errorf("masquerade entry of %s in %s: %w", ip, h.where(), err)
		}
		for _, e := range es {
			if e.jump != "" {
				return true, nil
			}
		}
	}
	return false, nil
}

// elemMsg builds a set element message for set with one element per key.
func (h *Handle) elemMsg(msgType int, flags mdnetlink.HeaderFlags, set string, keys [][]byte) mdnetlink.Message {
	elems := make([]nftElem, len(keys))
	for i, k := range keys {
		elems[i].key = k
	}
	return nftElemMsg(MasqTable, set, msgType, flags, elems, false)
}

// masqObjects returns the table and maps, for nftables calls.
func masqObjects() (table *nftables.Table, set4, set6 *nftables.Set) {
	table = &nftables.Table{Name: MasqTable, Family: nftables.TableFamilyINet}
	// HasTimeout: DeleteMasq expires elements instead of deleting them.
	set4 = &nftables.Set{Table: table, Name: masqMap4, IsMap: true, HasTimeout: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}
	set6 = &nftables.Set{Table: table, Name: masqMap6, IsMap: true, HasTimeout: true, KeyType: nftables.TypeIP6Addr, DataType: nftables.TypeVerdict}
	return table, set4, set6
}

// saddrVmap is `ip saddr vmap @set` (or ip6) in an inet chain.
func saddrVmap(v6 bool, set *nftables.Set) []expr.Any {
	return append(loadAddr(true, v6),
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, IsDestRegSet: true, DestRegister: 0})
}
