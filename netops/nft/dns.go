package nft

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The DNS table diverts the DNS of the pods in its sets, to the resolvers
// the operator trusts (its resolvers sets: the cluster DNS Service and its
// endpoints, and --dns-trusted-resolvers), to the agent's DNS proxy
// (agent/fqdn), which learns the answers of the pods that a
// ClusterNetworkPolicy's domainNames peer governs. A query to any other
// server is not diverted: it is one more connection of the pod's, which
// the policy table judges, and its answer is learned from by no one (a
// pod's own DNS server could otherwise name any address: issue 60,
// finding 4). It does so
// after kube-proxy's DNAT, so that the proxy sees the endpoint kube-proxy
// picked for a Service's ClusterIP, and without a NAT of its own, so that
// the kernel judges the pod's query as any other connection of the pod:
//
//	table inet cnibox-dns {
//		set pods-4 { type ipv4_addr }
//		set pods-6 { type ipv6_addr }
//		set resolvers-4 { type ipv4_addr }
//		set resolvers-6 { type ipv6_addr }
//		chain prerouting {
//			type filter hook prerouting priority -90; policy accept;
//			ip saddr @pods-4 ip daddr @resolvers-4 udp dport 53 meta mark set meta mark | 0x04000000 udp dport set 1053
//			ip saddr @pods-4 ip daddr @resolvers-4 tcp dport 53 meta mark set meta mark | 0x04000000 tcp dport set 1053
//			ip6 saddr @pods-6 ip6 daddr @resolvers-6 udp dport 53 ... (and tcp)
//		}
//		chain input {
//			type filter hook input priority -90; policy accept;
//			meta nfproto ipv4 udp dport 1053 meta mark & 0x04000000 != 0x04000000 counter drop
//			... (tcp, and IPv6's port)
//		}
//		chain output {
//			type filter hook output priority -300; policy accept;
//			ip daddr @pods-4 udp sport 1053 udp sport set 53
//			ip daddr @pods-4 tcp sport 1053 tcp sport set 53
//			ip6 daddr @pods-6 udp sport 1053 ... (and tcp)
//		}
//	}
//
// prerouting, at -90, comes after conntrack (-200) and kube-proxy's dstnat
// (-100): a query to a Service's ClusterIP has its endpoint as destination
// by then, and its conntrack entry says pod -> ClusterIP, replied by the
// endpoint. The rule marks the packet (DNSMark, or the mark DNSRedirect
// names) and changes its destination port to the proxy's in the packet
// only (a stateless rewrite; conntrack keeps port 53); the policy routing
// netops.MarkLocal (ip rule fwmark MARK lookup TABLE, local 0.0.0.0/0 and
// ::/0 dev lo in TABLE) then delivers it to the node, where the proxy
// listens on its port on every address with IP_TRANSPARENT and reads the
// endpoint as the packet's destination. On the way in the packet meets the
// input hook as pod -> endpoint:53 by its conntrack tuple, which is what
// the policy table's input chain judges. input drops what reaches the
// proxy's port unmarked (sent to the node's own address and port, not
// diverted), so that the proxy answers diverted queries only. output, at
// -300, before conntrack, puts port 53 back as the source of the proxy's
// answers to the pods (their source address is the endpoint already, the
// proxy's sockets being transparent): conntrack sees the reply of the
// pod's own connection and un-NATs it, and the pod has its answer from
// the ClusterIP it asked.
//
// Why not TPROXY (nftables' tproxy, which assigns the socket in
// prerouting and would need neither the rewrite nor output's): on a pod's
// bridge with br_netfilter on (net.bridge.bridge-nf-call-iptables, which
// the agent turns on and kube-proxy needs), the IP prerouting hook runs
// inside the bridge, and ip_rcv orphans the packet's socket when it goes
// up the stack afterwards; the packet then reaches no socket. A port the
// proxy listens on, reached by routing, works with br_netfilter on and off
// (TestDNSRedirect runs both).
//
// Only the pods in the sets are diverted, every packet of their DNS flows
// (prerouting matches each one, not only a connection's first). Without a
// proxy listening, their DNS gets no answer (the node has no socket on
// the port): it never goes around the proxy.
const (
	// DNSTable is the name of the inet table of the DNS redirection.
	DNSTable     = "cnibox-dns"
	dnsPods4     = "pods-4"
	dnsPods6     = "pods-6"
	dnsRes4      = "resolvers-4"
	dnsRes6      = "resolvers-6"
	dnsPort      = 53
	dnsRuleLabel = "cnibox dns: "
)

// DNSMark is the packet mark bit the DNS table sets on the pods' DNS it
// diverts, for the policy routing (netops.MarkLocal) that delivers it to
// the node: a bit of its own beside the firewall's (FirewallMarkPass,
// FirewallMarkDrop), clear of kube-proxy's 0x4000 and 0x8000.
const DNSMark = 0x04000000

// DNSRedirect is where the DNS table sends the pods' DNS.
type DNSRedirect struct {
	// Port4 and Port6 are the proxy's ports for IPv4 and IPv6, UDP and
	// TCP alike, on every address of the node; 0: that family's DNS is
	// not diverted.
	Port4, Port6 uint16
	// Mark is the bit (or bits) the diverted packets get, which the
	// policy routing matches; 0 is DNSMark.
	Mark uint32
}

// dnsChain is one of the DNS table's base chains.
type dnsChain struct {
	name string
	hook nftables.ChainHook
	prio nftables.ChainPriority
}

// dnsChains are the DNS table's chains, plain data (TestNoInitCode).
var dnsChains = [...]dnsChain{
	{"prerouting", unix.NF_INET_PRE_ROUTING, -90},
	{"input", unix.NF_INET_LOCAL_IN, -90},
	{"output", unix.NF_INET_LOCAL_OUT, -300},
}

func dnsTableObj() *nftables.Table {
	return &nftables.Table{Name: DNSTable, Family: nftables.TableFamilyINet}
}

// dnsSets are the DNS table's four sets with elements: the pods' (kept:
// added and deleted one by one) and the trusted resolvers' (the spec's own
// unless kept).
func dnsSets(pods4, pods6, res4, res6 []nftables.SetElement, keptRes bool) []setSpec {
	set := func(name string, v6 bool) *nftables.Set {
		if v6 {
			return &nftables.Set{Name: name, KeyType: nftables.TypeIP6Addr}
		}
		return &nftables.Set{Name: name, KeyType: nftables.TypeIPAddr}
	}
	return []setSpec{
		{set: set(dnsPods4, false), elems: pods4, kept: true}, {set: set(dnsPods6, true), elems: pods6, kept: true},
		{set: set(dnsRes4, false), elems: res4, kept: keptRes}, {set: set(dnsRes6, true), elems: res6, kept: keptRes},
	}
}

// EnsureDNSRedirect makes the DNS table divert as r says; the sets and
// their elements stay. When a chain's rules, hook, type or priority
// differ (or the table is not there), the difference is committed in one
// transaction (reconcile); changed reports that.
func (h *Handle) EnsureDNSRedirect(r DNSRedirect) (changed bool, err error) {
	if r.Mark == 0 {
		r.Mark = DNSMark
	}
	changed, err = h.reconcile(dnsTable(r))
	if err != nil {
		return false, fmt.Errorf("ensure DNS redirection to ports %d, %d in %s: %w", r.Port4, r.Port6, h.where(), classify(err))
	}
	return changed, nil
}

// dnsTable is the DNS table diverting as r says (its Mark set): its four
// sets, whose elements are others', and its three chains.
func dnsTable(r DNSRedirect) *tableSpec {
	want := dnsRules(r)
	s := &tableSpec{table: dnsTableObj(), owned: true, what: "DNS redirection", sets: dnsSets(nil, nil, nil, nil, true)}
	for i, c := range dnsChains {
		s.chains = append(s.chains, baseChain(c.name, nftables.ChainTypeFilter, c.hook, c.prio, want[i]))
	}
	return s
}

// dnsRules are the rules of each of dnsChains for r (without table and
// chain), each with a comment that says all it does (dnsRulesAre compares
// those).
func dnsRules(r DNSRedirect) [][]*nftables.Rule {
	out := make([][]*nftables.Rule, len(dnsChains))
	rule := func(chain int, comment string, exprs ...expr.Any) {
		out[chain] = append(out[chain], &nftables.Rule{Exprs: exprs, UserData: userdata.AppendString(nil, userdata.TypeComment, dnsRuleLabel+comment)})
	}
	for _, fam := range []struct {
		v6   bool
		port uint16
	}{{false, r.Port4}, {true, r.Port6}} {
		if fam.port == 0 {
			continue
		}
		set, res, nfproto := dnsPods4, dnsRes4, byte(unix.NFPROTO_IPV4)
		if fam.v6 {
			set, res, nfproto = dnsPods6, dnsRes6, unix.NFPROTO_IPV6
		}
		for _, proto := range []struct {
			name    string
			num     byte
			csumOff uint32 // the checksum's offset in the transport header
		}{{"udp", unix.IPPROTO_UDP, 6}, {"tcp", unix.IPPROTO_TCP, 16}} {
			l4 := []expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto.num}},
			}
			port := func(off uint32, p uint16) []expr.Any { // th [sd]port p
				return []expr.Any{
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(p)},
				}
			}
			setPort := func(off uint32, p uint16) []expr.Any { // th [sd]port set p
				return []expr.Any{
					&expr.Immediate{Register: 1, Data: be16(p)},
					&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseTransportHeader,
						Offset: off, Len: 2, CsumType: expr.CsumTypeInet, CsumOffset: proto.csumOff},
				}
			}
			markSet := []expr.Any{
				&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne32(^r.Mark), Xor: ne32(r.Mark)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
			}
			markUnset := []expr.Any{
				&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne32(r.Mark), Xor: ne32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ne32(r.Mark)},
			}
			rule(0, fmt.Sprintf("%s from @%s to @%s port %d: mark %#x, to port %d", proto.name, set, res, dnsPort, r.Mark, fam.port),
				slices.Concat(loadAddr(true, fam.v6), []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: set}},
					loadAddr(false, fam.v6), []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: res}},
					l4, port(2, dnsPort), markSet, setPort(2, fam.port))...)
			rule(1, fmt.Sprintf("%s %s to port %d without mark %#x: drop", nfName(fam.v6), proto.name, fam.port, r.Mark),
				slices.Concat(nfMatch(nfproto), l4, port(2, fam.port), markUnset,
					[]expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}})...)
			rule(2, fmt.Sprintf("%s from port %d to @%s: from port %d", proto.name, fam.port, set, dnsPort),
				slices.Concat(loadAddr(false, fam.v6), []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: set}},
					l4, port(0, fam.port), setPort(0, dnsPort))...)
		}
	}
	return out
}

func nfName(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}

// DNSRedirectRules returns the comments of the DNS table's rules, chain
// after chain (prerouting, input, output) in order (nil when the table is
// not there), for checks and the CLI.
func (h *Handle) DNSRedirectRules() ([]string, error) {
	var out []string
	for _, spec := range dnsChains {
		rules, err := h.chainComments(dnsTableObj(), spec.name)
		if err != nil {
			return nil, fmt.Errorf("list DNS redirection in %s: %w", h.where(), err)
		}
		out = append(out, rules...)
	}
	return out, nil
}

// EnsureDNSPods puts addrs (pods whose DNS goes to the proxy) in the DNS
// table's sets, making the table and sets when they are missing (the
// chains come with EnsureDNSRedirect; until then nothing is diverted).
// Addresses already there are no error. One transaction.
func (h *Handle) EnsureDNSPods(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	e4, e6, err := splitAddrs(addrs)
	if err == nil {
		_, err = h.reconcile(&tableSpec{table: dnsTableObj(), what: "the DNS table's pods", sets: dnsSets(e4, e6, nil, nil, true)})
	}
	if err != nil {
		return fmt.Errorf("ensure DNS redirection of pods %v in %s: %w", addrs, h.where(), classify(err))
	}
	return nil
}

// splitAddrs are the elements of addrs, IPv4 and IPv6 apart.
func splitAddrs(addrs []netip.Addr) (e4, e6 []nftables.SetElement, err error) {
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case a.Is4():
			e4 = append(e4, nftables.SetElement{Key: a.AsSlice()})
		case a.Is6():
			e6 = append(e6, nftables.SetElement{Key: a.AsSlice()})
		default:
			return nil, nil, fmt.Errorf("%v is not an address", a)
		}
	}
	return e4, e6, nil
}

// dnsAddrs returns the addresses in the DNS table's sets named (none when
// the table is not there).
func (h *Handle) dnsAddrs(sets ...string) ([]netip.Addr, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, set := range sets {
		elems, err := h.dumpElems(DNSTable, set)
		if err != nil {
			return nil, fmt.Errorf("list the DNS table's %s in %s: %w", set, h.where(), err)
		}
		for _, e := range elems {
			if a, ok := netip.AddrFromSlice(e.key); ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// DeleteDNSPods takes addrs out of the DNS table's sets; an address (or a
// table) that is not there is no error.
func (h *Handle) DeleteDNSPods(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	if _, err := h.nftConn(); err != nil {
		return fmt.Errorf("delete DNS redirection of pods %v in %s: %w", addrs, h.where(), err)
	}
	var k4, k6 [][]byte
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() {
			k4 = append(k4, a.AsSlice())
		} else if a.Is6() {
			k6 = append(k6, a.AsSlice())
		}
	}
	if _, err := h.delPresentElems(nftables.TableFamilyINet, DNSTable, setKeys{set: dnsPods4, keys: k4}, setKeys{set: dnsPods6, keys: k6}); err != nil {
		return fmt.Errorf("delete DNS redirection of pods %v in %s: %w", addrs, h.where(), classify(err))
	}
	return nil
}

// DNSPods returns the addresses in the DNS table's pod sets (none when
// the table is not there).
func (h *Handle) DNSPods() ([]netip.Addr, error) { return h.dnsAddrs(dnsPods4, dnsPods6) }

// DeleteDNSRedirect removes the DNS table, its sets with it; a missing
// table is no error.
func (h *Handle) DeleteDNSRedirect() error {
	if err := h.deleteTable(dnsTableObj()); err != nil {
		return fmt.Errorf("delete DNS redirection in %s: %w", h.where(), err)
	}
	return nil
}
