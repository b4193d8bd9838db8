package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The DNS table sends the DNS of the pods in its sets, to any server, to
// the agent's DNS proxy (agent/fqdn), which learns the answers of the
// pods that a ClusterNetworkPolicy's domainNames peer governs:
//
//	table inet cnibox-dns {
//		set pods-4 { type ipv4_addr }
//		set pods-6 { type ipv6_addr }
//		chain prerouting {
//			type nat hook prerouting priority -110; policy accept;
//			ip saddr @pods-4 udp dport 53 dnat ip to 10.244.1.1:1053
//			ip saddr @pods-4 tcp dport 53 dnat ip to 10.244.1.1:1053
//			ip6 saddr @pods-6 udp dport 53 dnat ip6 to [fd00:244:1::1]:1053
//			ip6 saddr @pods-6 tcp dport 53 dnat ip6 to [fd00:244:1::1]:1053
//		}
//	}
//
// Priority -110 is before kube-proxy's dstnat (-100): a connection is
// DNATed once per hook, so a query to a Service's ClusterIP reaches the
// proxy with the ClusterIP still its original destination (what the pod
// asked for), and kube-proxy's chain never sees it; the proxy forwards it
// from the node, where kube-proxy's output chain picks the endpoint. Only
// new connections meet a nat chain: a pod's flow to port 53 that was there
// before its address entered the set goes on to its server directly until
// it ends.
const (
	// DNSTable is the name of the inet table of the DNS redirection.
	DNSTable     = "cnibox-dns"
	dnsChain     = "prerouting"
	dnsPods4     = "pods-4"
	dnsPods6     = "pods-6"
	dnsPriority  = -110
	dnsPort      = 53
	dnsRuleLabel = "cnibox dns: "
)

// DNSMark is the packet mark bit the DNS table sets on the pods' DNS it
// diverts, for the policy routing (netops.MarkLocal) that delivers it to
// the node: a bit of its own beside the firewall's (FirewallMarkPass,
// FirewallMarkDrop), clear of kube-proxy's 0x4000 and 0x8000.
const DNSMark = 0x04000000

// DNSRedirect is where the DNS table sends the pods' DNS: the proxy's
// listening address and port per family; a family whose target is not
// valid is not redirected.
type DNSRedirect struct {
	To4, To6 netip.AddrPort
}

func dnsObjects() (*nftables.Table, *nftables.Set, *nftables.Set) {
	table := &nftables.Table{Name: DNSTable, Family: nftables.TableFamilyINet}
	return table,
		&nftables.Set{Table: table, Name: dnsPods4, KeyType: nftables.TypeIPAddr},
		&nftables.Set{Table: table, Name: dnsPods6, KeyType: nftables.TypeIP6Addr}
}

// EnsureDNSRedirect makes the DNS table redirect as r says; the sets and
// their elements stay. When the chain's rules differ (or the table is not
// there), the chain is rewritten in one transaction; changed reports that.
func (h *Handle) EnsureDNSRedirect(r DNSRedirect) (changed bool, err error) {
	if r.To4.IsValid() && !r.To4.Addr().Unmap().Is4() || r.To6.IsValid() && (!r.To6.Addr().Is6() || r.To6.Addr().Is4In6()) {
		return false, fmt.Errorf("ensure DNS redirection: %v is not an IPv4 and %v not an IPv6 address and port", r.To4, r.To6)
	}
	t, err := h.begin()
	if err != nil {
		return false, fmt.Errorf("ensure DNS redirection in %s: %w", h.where(), err)
	}
	want := dnsRules(r)
	if same, err := h.dnsRulesAre(want); err != nil || same {
		return false, err
	}
	c := t.conn()
	table, set4, set6 := dnsObjects()
	c.AddTable(table)
	if err := t.addSet(set4, nil); err != nil {
		t.abort()
		return false, err
	}
	if err := t.addSet(set6, nil); err != nil {
		t.abort()
		return false, err
	}
	ch := t.addBaseChain(table, dnsChain, nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityRef(dnsPriority))
	c.FlushChain(ch)
	for _, rule := range want {
		rule.Table, rule.Chain = table, ch
		c.AddRule(rule)
	}
	if err := t.commit(); err != nil {
		return false, fmt.Errorf("ensure DNS redirection to %v, %v in %s: %w", r.To4, r.To6, h.where(), classify(err))
	}
	return true, nil
}

// dnsRules are the chain's rules for r (without table and chain), each
// with a comment that says all it does (dnsRulesAre compares those).
func dnsRules(r DNSRedirect) []*nftables.Rule {
	var out []*nftables.Rule
	for _, to := range []netip.AddrPort{r.To4, r.To6} {
		if !to.IsValid() {
			continue
		}
		addr := to.Addr().Unmap()
		v6 := addr.Is6()
		set, family := dnsPods4, uint32(unix.NFPROTO_IPV4)
		if v6 {
			set, family = dnsPods6, unix.NFPROTO_IPV6
		}
		for _, proto := range []struct {
			name string
			num  byte
		}{{"udp", unix.IPPROTO_UDP}, {"tcp", unix.IPPROTO_TCP}} {
			exprs := append(loadAddr(true, v6),
				&expr.Lookup{SourceRegister: 1, SetName: set},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto.num}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(dnsPort)},
				&expr.Immediate{Register: 1, Data: addr.AsSlice()},
				&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(to.Port())},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegProtoMin: 2},
			)
			comment := fmt.Sprintf("%s%s from @%s to %s", dnsRuleLabel, proto.name, set, netip.AddrPortFrom(addr, to.Port()))
			out = append(out, &nftables.Rule{Exprs: exprs, UserData: userdata.AppendString(nil, userdata.TypeComment, comment)})
		}
	}
	return out
}

// dnsRulesAre reports whether the DNS chain and both sets are there and
// the chain holds exactly want (by their comments, which say all a rule
// does, and their number of expressions).
func (h *Handle) dnsRulesAre(want []*nftables.Rule) (bool, error) {
	for _, set := range []string{dnsPods4, dnsPods6} {
		if ok, err := h.nftSetExists(unix.NFPROTO_INET, DNSTable, set); err != nil || !ok {
			return false, err
		}
	}
	ok, err := h.nftChainExists(unix.NFPROTO_INET, DNSTable, dnsChain)
	if err != nil || !ok {
		return false, err
	}
	table, _, _ := dnsObjects()
	have, err := h.nft.GetRules(table, &nftables.Chain{Name: dnsChain, Table: table})
	if err != nil {
		return false, fmt.Errorf("list DNS redirection in %s: %w", h.where(), err)
	}
	if len(have) != len(want) {
		return false, nil
	}
	for i := range want {
		if !sameRule(have[i], want[i]) {
			return false, nil
		}
	}
	return true, nil
}

// DNSRedirectRules returns the comments of the DNS chain's rules, in
// order (nil when the table is not there), for checks and the CLI.
func (h *Handle) DNSRedirectRules() ([]string, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	ok, err := h.nftChainExists(unix.NFPROTO_INET, DNSTable, dnsChain)
	if err != nil || !ok {
		return nil, err
	}
	table, _, _ := dnsObjects()
	rules, err := h.nft.GetRules(table, &nftables.Chain{Name: dnsChain, Table: table})
	if err != nil {
		return nil, fmt.Errorf("list DNS redirection in %s: %w", h.where(), err)
	}
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		out = append(out, s)
	}
	return out, nil
}

// EnsureDNSPods puts addrs (pods whose DNS goes to the proxy) in the DNS
// table's sets, making the table and sets when they are missing (the
// chain comes with EnsureDNSRedirect; until then nothing is redirected).
// Addresses already there are no error. One transaction.
func (h *Handle) EnsureDNSPods(addrs []netip.Addr) error {
	var e4, e6 []nftables.SetElement
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case a.Is4():
			e4 = append(e4, nftables.SetElement{Key: a.AsSlice()})
		case a.Is6():
			e6 = append(e6, nftables.SetElement{Key: a.AsSlice()})
		default:
			return fmt.Errorf("ensure DNS redirection of pods %v: %v is not an address", addrs, a)
		}
	}
	if len(e4)+len(e6) == 0 {
		return nil
	}
	t, err := h.begin()
	if err != nil {
		return fmt.Errorf("ensure DNS redirection of pods %v in %s: %w", addrs, h.where(), err)
	}
	c := t.conn()
	table, set4, set6 := dnsObjects()
	c.AddTable(table)
	for _, s := range []struct {
		set   *nftables.Set
		elems []nftables.SetElement
	}{{set4, e4}, {set6, e6}} {
		if err := t.addSet(s.set, nil); err != nil {
			t.abort()
			return err
		}
		if len(s.elems) == 0 {
			continue
		}
		if err := c.SetAddElements(s.set, s.elems); err != nil {
			t.abort()
			return err
		}
	}
	if err := t.commit(); err != nil {
		return fmt.Errorf("ensure DNS redirection of pods %v in %s: %w", addrs, h.where(), classify(err))
	}
	return nil
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

// DNSPods returns the addresses in the DNS table's sets (none when the
// table is not there).
func (h *Handle) DNSPods() ([]netip.Addr, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, set := range []string{dnsPods4, dnsPods6} {
		elems, err := h.dumpElems(DNSTable, set)
		if err != nil {
			return nil, fmt.Errorf("list DNS redirection of pods in %s: %w", h.where(), err)
		}
		for _, e := range elems {
			if a, ok := netip.AddrFromSlice(e.key); ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// DeleteDNSRedirect removes the DNS table, its sets with it; a missing
// table is no error.
func (h *Handle) DeleteDNSRedirect() error {
	t, err := h.begin()
	if err != nil {
		return fmt.Errorf("delete DNS redirection in %s: %w", h.where(), err)
	}
	c := t.conn()
	table, _, _ := dnsObjects()
	c.AddTable(table)
	c.DelTable(table)
	if err := t.commit(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete DNS redirection in %s: %w", h.where(), err)
	}
	return nil
}
