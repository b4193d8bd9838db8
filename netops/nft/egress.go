package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/internal/ifname"
)

// The egress gateway's table (issue 52): the pods an EgressGateway selects
// leave the cluster from its egress IP, which one node holds. That node
// SNATs their traffic to the egress IP on its uplink; every other node
// routes its selected pods' outbound traffic to the holder over the
// overlay (netops.SyncEgressRoutes) and keeps their pod address on the
// way, so that the holder sees, and SNATs, the pod's own address. Two
// tables of one name, family ip for the IPv4 egress addresses and family
// ip6 for the IPv6 ones (issue 64: the same rules, `ip6 saddr`, `snat ip6
// to`, `rt ip6 nexthop`), each reconciled in one transaction when its
// rules or sets differ (core.go), each deleted when it has no rule:
//
//	table ip cnibox-egress {
//		set cluster { type ipv4_addr; flags interval; elements = { 10.244.0.0/16, 10.96.0.0/12 } }
//		set src-0 { type ipv4_addr; elements = { 10.244.1.5, 10.244.2.7 } }
//		set dst-0 { type ipv4_addr; flags interval; ... }   # only with Destinations
//		set src-1 { type ipv4_addr; elements = { 10.244.1.9 } }
//		chain postrouting {
//			type nat hook postrouting priority srcnat - 10; policy accept;
//			ip daddr @cluster return
//			ip saddr @src-0 ip daddr @dst-0 oifname "eth0" snat ip to 192.0.2.10   # held here
//			ip saddr @src-1 snat ip to ip saddr                                    # held elsewhere
//		}
//	}
//	table ip6 cnibox-egress {                                                   # the same, ipv6_addr sets
//		...
//			ip6 saddr @src-0 oifname "eth0" snat ip6 to 2001:db8:1::10
//			ip6 saddr @src-1 rt ip6 nexthop fd00:ee::2 snat ip6 to ip6 saddr
//	}
//
// Why priority srcnat - 10, and why an identity SNAT (`snat ip to ip
// saddr`) for the pods whose gateway another node holds: the nat chains of
// a hook are not base chains of their own in the kernel's hook list. nf_nat
// registers one hook per family and hook (nf_nat_ipv4_out at
// NF_IP_PRI_NAT_SRC), and every nat-type chain, nftables' or iptables', is
// an entry in that hook's lookup list, sorted by priority. For the first
// packet of a connection, nf_nat_inet_fn runs the entries in order and,
// after each one, stops as soon as the connection has a binding of the
// hook's kind (nf_nat_initialized(ct, NF_NAT_MANIP_SRC)): "the first NAT
// binding made at a hook wins"; the later nat chains are not evaluated for
// that connection, and every later packet follows the binding without
// running any chain. When no chain binds, nf_nat adds a null binding.
// (This is nf_nat's own hook since Linux 4.18; before, each nat table had
// its hook and skipped its chain once the connection had that binding:
// the same rule.)
//
// So this chain, at srcnat - 10 (90), runs before the overlay's
// masquerade (table inet cnibox-overlay at srcnat, 100) and before
// iptables' nat POSTROUTING (kube-proxy's and flanneld's masquerade, also
// 100): a held gateway's SNAT is the one the connection gets, and an
// identity SNAT binds the pod's own address, so the overlay's "pod to
// outside" masquerade does not rewrite it to this node's address on its
// way to the holder (it would then leave from the holder as this node's
// traffic, not the pod's). `ip daddr @cluster return` binds nothing: such
// traffic goes on to the later chains as before. TestEgressTraffic shows
// both with real connections, beside the overlay's masquerade.
const (
	// EgressTable is the name of the ip table of the egress gateways.
	EgressTable   = "cnibox-egress"
	egressChain   = "postrouting"
	egressCluster = "cluster"
	egressLabel   = "cnibox egress"
	// egressNameMax bounds a rule's Name in its comment (a rule's
	// userdata holds at most 256 bytes).
	egressNameMax = 128
)

// egressPriority is the chain's priority: srcnat - 10.
const egressPriority = 90 // *nftables.ChainPriorityNATSource - 10

// ErrEgressFamily is wrapped by EnsureEgress's error about a rule whose
// sources, destinations or next hop are not of its egress IP's family.
var ErrEgressFamily = errors.New("not of the egress IP's address family")

// EgressSpec is what the egress table holds.
type EgressSpec struct {
	// Cluster are the destinations never redirected nor SNATed: the
	// cluster networks, the service range.
	Cluster []netip.Prefix
	// Uplink is the interface a held address's traffic leaves by (the
	// SNAT is made there only); needed when a rule is Held.
	Uplink string
	// Rules are the egress gateways, in order: the first whose sources
	// (and destinations) match a connection decides.
	Rules []EgressRule
}

// EgressRule is one egress gateway (one egress IP).
type EgressRule struct {
	// Name names the rule in its comments, e.g. "gateway
	// prod/192.0.2.10" (at most 128 bytes of it are kept).
	Name     string
	EgressIP netip.Addr
	// Held: this node holds EgressIP.
	Held bool
	// Sources are, when Held, every pod address that leaves from
	// EgressIP (pods of any node); when not held, this node's pods that
	// use it (their traffic is routed to the holder and keeps its pod
	// source address).
	Sources []netip.Addr
	// Destinations restrict the rule; empty: everything outside Cluster.
	Destinations []netip.Prefix
	// Via, when not held, is the next hop of the route to the holder
	// (netops.EgressRoute's Via): the source is kept only for packets
	// the kernel routes there (`rt ip nexthop`), so that a pod whose
	// route is not (or no longer) in place is masqueraded as before
	// instead of leaving with its pod address, whatever order the rules
	// and the routes change in. The zero Addr: no such match.
	Via netip.Addr
}

// egressSet is one set of the table with its elements.
type egressSet struct {
	set   *nftables.Set
	elems []nftables.SetElement
}

// egressTableObj is the table of the family of v6.
func egressTableObj(v6 bool) *nftables.Table {
	if v6 {
		return &nftables.Table{Name: EgressTable, Family: nftables.TableFamilyIPv6}
	}
	return &nftables.Table{Name: EgressTable, Family: nftables.TableFamilyIPv4}
}

// check validates s: every address of a rule of its egress IP's family,
// an uplink for a held rule. Cluster may hold both families (each table
// takes its own).
func (s EgressSpec) check() error {
	for _, p := range s.Cluster {
		if !p.IsValid() {
			return fmt.Errorf("cluster network %v: not a prefix", p)
		}
	}
	for _, r := range s.Rules {
		ip := r.EgressIP.Unmap()
		if !ip.IsValid() {
			return fmt.Errorf("egress IP of %s: %v is not an address", r.Name, r.EgressIP)
		}
		same := func(what string, a netip.Addr) error {
			if a.Unmap().Is6() != ip.Is6() {
				return fmt.Errorf("%s of %s %v (egress IP %s): %w", what, r.Name, a, ip, ErrEgressFamily)
			}
			return nil
		}
		if r.Held {
			if err := ifname.Check("egress uplink", s.Uplink); err != nil {
				return fmt.Errorf("egress %s holds %s: %w", r.Name, r.EgressIP, err)
			}
		}
		for _, a := range r.Sources {
			if err := same("source", a); err != nil {
				return err
			}
		}
		for _, p := range r.Destinations {
			if !p.IsValid() {
				return fmt.Errorf("destination of %s %v: not a prefix", r.Name, p)
			}
			if err := same("destination", p.Addr()); err != nil {
				return err
			}
		}
		if r.Via.IsValid() {
			if err := same("next hop", r.Via); err != nil {
				return err
			}
		}
	}
	return nil
}

// family is the part of s whose egress IPs are of v6's family.
func (s EgressSpec) family(v6 bool) EgressSpec {
	out := EgressSpec{Uplink: s.Uplink}
	for _, p := range s.Cluster {
		if p.Addr().Unmap().Is6() == v6 {
			out.Cluster = append(out.Cluster, p)
		}
	}
	for _, r := range s.Rules {
		if r.EgressIP.Unmap().Is6() == v6 {
			out.Rules = append(out.Rules, r)
		}
	}
	return out
}

// EnsureEgress makes the egress table hold s: when its rules or sets differ
// (or are gone: someone deleted a rule, an element, or the table), the
// difference is committed in one nftables transaction (reconcile); changed
// reports that. An empty Rules list deletes the table (changed: it was
// there). A check that finds the table in place costs its dumps and
// commits nothing.
func (h *Handle) EnsureEgress(s EgressSpec) (changed bool, err error) {
	if err := s.check(); err != nil {
		return false, fmt.Errorf("ensure egress: %w", err)
	}
	for _, v6 := range []bool{false, true} {
		c, err := h.ensureEgressFamily(s.family(v6), v6)
		if err != nil {
			return changed, err
		}
		changed = changed || c
	}
	return changed, nil
}

// ensureEgressFamily makes the table of v6's family hold s (whose rules
// are all of that family).
func (h *Handle) ensureEgressFamily(s EgressSpec, v6 bool) (changed bool, err error) {
	if len(s.Rules) == 0 {
		return h.dropIfThere(egressTableObj(v6), egressChain)
	}
	changed, err = h.reconcile(egressTable{s}.spec())
	if err != nil {
		return false, fmt.Errorf("ensure egress (%d gateways, %s) in %s: %w", len(s.Rules), egressFamilyName(v6), h.where(), classify(err))
	}
	return changed, nil
}

// egressFamilyName names v6's family as nft does.
func egressFamilyName(v6 bool) string {
	if v6 {
		return "ip6"
	}
	return "ip"
}

// egressTable is the egress table of one family (its rules' egress IPs',
// EgressSpec.family) as its spec says.
type egressTable struct{ EgressSpec }

// spec is the table: its sets and its one chain.
func (e egressTable) spec() *tableSpec {
	v6 := len(e.Rules) > 0 && e.Rules[0].EgressIP.Unmap().Is6()
	sets, rules := egressObjects(e.EgressSpec, v6)
	s := &tableSpec{table: egressTableObj(v6), owned: true, what: "egress " + egressFamilyName(v6),
		chains: []chainSpec{baseChain(egressChain, nftables.ChainTypeNAT, *nftables.ChainHookPostrouting, egressPriority, rules)}}
	for _, es := range sets {
		s.sets = append(s.sets, setSpec{set: es.set, elems: es.elems})
	}
	return s
}

// dropIfThere deletes table when it has chain (a table a spec of no
// objects leaves out); deleted reports that it was there.
func (h *Handle) dropIfThere(table *nftables.Table, chain string) (deleted bool, err error) {
	if _, err := h.nftConn(); err != nil {
		return false, err
	}
	ok, err := h.nftChainExists(uint8(table.Family), table.Name, chain)
	if err != nil || !ok {
		return false, err
	}
	if err := h.deleteTable(table); err != nil {
		return false, fmt.Errorf("delete table %s in %s: %w", table.Name, h.where(), err)
	}
	return true, nil
}

// egressObjects are the table's sets (with their elements) and its rules
// (without table and chain), each rule with a comment that says all it
// does but the sets' elements.
func egressObjects(s EgressSpec, v6 bool) ([]egressSet, []*nftables.Rule) {
	table := egressTableObj(v6)
	keyType, nfproto, nexthop := nftables.TypeIPAddr, byte(unix.NFPROTO_IPV4), expr.RtNexthop4
	if v6 {
		keyType, nfproto, nexthop = nftables.TypeIP6Addr, unix.NFPROTO_IPV6, expr.RtNexthop6
	}
	interval := func(name string, ps []netip.Prefix) egressSet {
		return egressSet{&nftables.Set{Table: table, Name: name, KeyType: keyType, Interval: true}, prefixIntervals(ps, v6)}
	}
	sets := []egressSet{interval(egressCluster, s.Cluster)}
	var rules []*nftables.Rule
	rule := func(comment string, exprs ...[]expr.Any) { rules = append(rules, commentedRule(comment, exprs...)) }
	lookup := func(src bool, set string) []expr.Any {
		return append(ipAddrLoad(src, v6), &expr.Lookup{SourceRegister: 1, SetName: set})
	}
	rule(egressLabel+": to @"+egressCluster+": return", lookup(false, egressCluster), []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}})
	for i, r := range s.Rules {
		name := r.Name
		if len(name) > egressNameMax {
			name = name[:egressNameMax]
		}
		src := fmt.Sprintf("src-%d", i)
		sets = append(sets, egressSet{&nftables.Set{Table: table, Name: src, KeyType: keyType}, egressAddrElems(r.Sources)})
		match := lookup(true, src)
		what := "from @" + src
		if len(r.Destinations) > 0 {
			dst := fmt.Sprintf("dst-%d", i)
			sets = append(sets, interval(dst, r.Destinations))
			match = append(match, lookup(false, dst)...)
			what += " to @" + dst
		}
		egressIP := r.EgressIP.Unmap()
		if r.Held {
			rule(fmt.Sprintf("%s %s: held: %s out %s: snat to %s", egressLabel, name, what, s.Uplink, egressIP), match,
				[]expr.Any{
					&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameKey(s.Uplink)},
					&expr.Immediate{Register: 1, Data: egressIP.AsSlice()},
					&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(nfproto), RegAddrMin: 1},
				})
			continue
		}
		// snat ip to ip saddr (ip6: snat ip6 to ip6 saddr): a binding
		// that keeps the pod's address.
		if r.Via.IsValid() {
			match = append(match, &expr.Rt{Register: 1, Key: nexthop},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: r.Via.Unmap().AsSlice()})
			what += " via " + r.Via.Unmap().String()
		}
		rule(fmt.Sprintf("%s %s: to the holder of %s: %s: keep the source (snat to ip saddr)", egressLabel, name, egressIP, what), match,
			ipAddrLoad(true, v6),
			[]expr.Any{&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(nfproto), RegAddrMin: 1}})
	}
	return sets, rules
}

// ipAddrLoad loads a packet's source (src) or destination address into
// register 1 in an ip table (v6: an ip6 table).
func ipAddrLoad(src, v6 bool) []expr.Any {
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
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
}

// ipv4Elems are the elements of a set of IPv4 addresses, each once (the
// egress tables' and the tests' name for egressAddrElems).
func ipv4Elems(addrs []netip.Addr) []nftables.SetElement { return egressAddrElems(addrs) }

// egressAddrElems are the elements of a set of addresses of one family,
// each once.
func egressAddrElems(addrs []netip.Addr) []nftables.SetElement {
	keys := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		keys = append(keys, a.Unmap())
	}
	slices.SortFunc(keys, netip.Addr.Compare)
	keys = slices.Compact(keys)
	out := make([]nftables.SetElement, len(keys))
	for i, a := range keys {
		out[i] = nftables.SetElement{Key: a.AsSlice()}
	}
	return out
}

// DeleteEgress removes the egress tables (ip and ip6). A missing table is
// not an error.
func (h *Handle) DeleteEgress() error {
	return errors.Join(egressOne(false).drop(h), egressOne(true).drop(h))
}

// EgressRules returns the comments of the egress tables' rules, the ip
// table's then the ip6 table's, in order (nil when neither is there), for
// checks and `cnibox inspect egress`.
func (h *Handle) EgressRules() ([]string, error) {
	var out []string
	for _, v6 := range []bool{false, true} {
		c, err := egressOne(v6).comments(h)
		if err != nil {
			return nil, err
		}
		out = append(out, c...)
	}
	return out, nil
}

// egressOne is the table of v6's family as a oneChain.
func egressOne(v6 bool) oneChain {
	return oneChain{table: egressTableObj(v6), chain: egressChain, what: "egress " + egressFamilyName(v6)}
}
