package nft

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The MultiNetworkPolicy table. A pod's secondary interfaces (macvlan,
// ipvlan, vlan, host-device, a bridge of its own) carry traffic that never
// crosses the node's forward hook: two macvlan pods of one node talk
// through the parent device, and host-device hands a whole NIC to the pod.
// So a pod's MultiNetworkPolicies are rendered into a table of the pod's
// own network namespace, as multi-networkpolicy-iptables does with
// iptables, one table per pod written whole in one transaction:
//
//	table inet cnibox-mnp {
//		set i0-<set>-4 / -6      # the sets the rules of interface 0 use
//		counter c-<rule> ...; c-i0-iso-in, c-i0-iso-eg
//		chain input  { type filter hook input priority 0
//			icmpv6 type 133-137 accept        # neighbour and router discovery
//			iifname "net1" ct direction reply jump i0-eg   # replies of its own connections
//			iifname "net1" jump i0-in                      # the rest: connections to it
//		}
//		chain output { type filter hook output priority 0
//			icmpv6 type 133-137 accept
//			oifname "net1" ct direction reply jump i0-in
//			oifname "net1" jump i0-eg
//		}
//		chain i0-in  { meta nfproto ipv4 jump i0-in4; meta nfproto ipv6 jump i0-in6 }
//		chain i0-in4 { <rule of a policy> counter name c-<rule> accept ...; counter name c-i0-iso-in drop }
//	}
//
// A direction the pod is not isolated in has no chain, and its jump is an
// accept: the other direction's replies must still not reach the other
// direction's rules. The rules are the node table's (policyRuleExprs: the
// connection's tuple, both directions alike), with only the NetworkPolicy
// tier: a policy listed here selects the pod. A packet without a conntrack
// tuple is handled as in the node table (policy_entry.go): on an
// interface a policy isolates, what conntrack calls INVALID is dropped
// first (counter c-i0-invalid), and an UNTRACKED packet is judged as a
// new connection in the direction of the hook it meets, by the twins of
// that direction's chains (i0-in4u, ...), which read its own fields:
//
//		iifname "net1" ct state invalid counter name c-i0-invalid drop
//		iifname "net1" ct state untracked jump i0-inu

// MultiTable is the table of a pod's MultiNetworkPolicies, in the pod's
// network namespace (family inet).
const MultiTable = "cnibox-mnp"

// PodPolicy is what a pod's MultiNetworkPolicies decide: per secondary
// interface, the policies of its network that select the pod.
type PodPolicy struct {
	Ifaces []PodIface
}

// PodIface is one interface of a pod and its network's policies.
type PodIface struct {
	Name            string // in the pod: "net1"
	Ingress, Egress PodDir
	// Sets are the sets the policies' clauses name, with their elements
	// on this interface's network (each interface's are its own).
	Sets []*policymodel.Set
}

// PodDir is one direction of an interface: whether a policy isolates the
// pod in it, and the policies whose rules allow.
type PodDir struct {
	Isolated bool
	Policies []*policymodel.Policy
}

// Isolated reports whether any interface is isolated in a direction: if
// not, the pod has no table.
func (p *PodPolicy) Isolated() bool {
	for _, i := range p.Ifaces {
		if i.Ingress.Isolated || i.Egress.Isolated {
			return true
		}
	}
	return false
}

// ApplyPodPolicy makes the handle's namespace's MultiTable what p says
// through the core (core.go): the table is compared with the kernel's and
// only what differs is written, in one transaction (a chain whose rules
// differ flushed and filled again in it, so no packet meets it half
// written); a table as p says sends nothing. With no interface isolated,
// the table is removed.
func (h *Handle) ApplyPodPolicy(p *PodPolicy) error {
	if err := checkPodPolicy(p); err != nil {
		return fmt.Errorf("apply multi-network policy in %s: %w", h.where(), err)
	}
	if _, err := h.nftConn(); err != nil {
		return err
	}
	tb := &nftables.Table{Name: MultiTable, Family: policyFamily}
	if !p.Isolated() {
		exists, err := h.tableExists(tb)
		if err != nil {
			return fmt.Errorf("apply multi-network policy in %s: %w", h.where(), classify(err))
		}
		if !exists {
			return nil
		}
		if err := h.deleteTable(tb); err != nil {
			return fmt.Errorf("apply multi-network policy in %s: %w", h.where(), classify(err))
		}
		return nil
	}
	if _, err := h.reconcile(podPolicySpec(tb, p)); err != nil {
		return fmt.Errorf("apply multi-network policy in %s: %w", h.where(), classify(err))
	}
	return nil
}

// DeletePodPolicy removes the handle's namespace's MultiTable, if any.
func (h *Handle) DeletePodPolicy() error { return h.ApplyPodPolicy(&PodPolicy{}) }

// HasPodPolicy reports whether the handle's namespace has a MultiTable.
func (h *Handle) HasPodPolicy() (bool, error) {
	if _, err := h.nftConn(); err != nil {
		return false, err
	}
	ok, err := h.tableExists(&nftables.Table{Name: MultiTable, Family: policyFamily})
	if err != nil {
		return false, fmt.Errorf("read the multi-network policy table in %s: %w", h.where(), classify(err))
	}
	return ok, nil
}

func (h *Handle) tableExists(tb *nftables.Table) (bool, error) {
	tbs, err := consistently(h, func() ([]*nftables.Table, error) { return h.nft.ListTablesOfFamily(tb.Family) })
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(tbs, func(t *nftables.Table) bool { return t.Name == tb.Name }), nil
}

// checkPodPolicy refuses what the kernel would, named: an interface name
// it cannot hold, one listed twice.
func checkPodPolicy(p *PodPolicy) error {
	seen := map[string]bool{}
	for _, i := range p.Ifaces {
		if i.Name == "" || len(i.Name) >= unix.IFNAMSIZ {
			return fmt.Errorf("interface name %q: want 1 to %d bytes", i.Name, unix.IFNAMSIZ-1)
		}
		if seen[i.Name] {
			return fmt.Errorf("interface %q listed twice", i.Name)
		}
		seen[i.Name] = true
		for _, d := range []PodDir{i.Ingress, i.Egress} {
			for _, pol := range d.Policies {
				if pol.ID == "" {
					return fmt.Errorf("interface %q: a policy without ID", i.Name)
				}
			}
		}
	}
	return nil
}

// icmpv6Discovery is the ICMPv6 types of router and neighbour discovery
// (133 router solicitation to 137 redirect): a link without them has no
// IPv6, so no policy decides them, as none decides ARP.
var icmpv6Discovery = [2]byte{133, 137}

// podPolicySpec is the table of p (which isolates something).
func podPolicySpec(tb *nftables.Table, p *PodPolicy) *tableSpec {
	spec := &tableSpec{table: tb, owned: true, what: "the multi-network policy table"}
	pc := &policyChains{rules: map[string][][]expr.Any{}, keys: map[string]chainFP{}, ids: map[string]string{}}
	counters := map[string]bool{}
	var in, out [][]expr.Any
	nd := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: icmpv6Discovery[:1], ToData: icmpv6Discovery[1:]},
		verdict(expr.VerdictAccept, ""),
	}
	in, out = append(in, nd), append(out, nd)
	for i, ifc := range p.Ifaces {
		prefix := fmt.Sprintf("i%d", i)
		rename := func(id policymodel.SetID) policymodel.SetID {
			if id == "" {
				return ""
			}
			return policymodel.SetID(prefix + "-" + string(id))
		}
		for _, s := range ifc.Sets {
			spec.sets = append(spec.sets, podSets(tb, rename(s.ID), s)...)
		}
		// to[dir] is where that direction's packets go: its chain, or an
		// accept when the pod is not isolated in it.
		var to [2]expr.Any
		for dir, d := range [2]PodDir{ifc.Ingress, ifc.Egress} {
			name := policymodel.Direction(dir).Short()
			to[dir] = verdict(expr.VerdictAccept, "")
			if !d.Isolated {
				continue
			}
			top := prefix + "-" + name
			to[dir] = verdict(expr.VerdictJump, top)
			pc.add(top)
			for _, v6 := range []bool{false, true} {
				pd := policyDir{name: name, base: top, dir: policymodel.Direction(dir), selfDir: uint32(1 - dir), v6: v6}
				ch := top + pd.fam()
				pc.add(top, append(nfprotoIs(famProto(v6)), verdict(expr.VerdictJump, ch)))
				pc.add(ch)
				for _, pol := range d.Policies {
					for _, r := range pol.Rules {
						r = renameRule(r, rename)
						counters[counterName(pc.ruleKey(r.ID))] = true
						pc.add(ch, pd.policyRuleExprs(pc, &r, verdict(expr.VerdictAccept, ""), policymodel.LogScope{}, true)...)
					}
				}
				iso := counterName(top + "-iso")
				counters[iso] = true
				pc.add(ch, countAnd(iso, verdict(expr.VerdictDrop, "")))
				renderUntracked(pc, []string{ch}, v6)
			}
			renderUntracked(pc, []string{top}, false) // its rules: nfproto jumps
		}
		name := ifnameKey(ifc.Name)
		reply := []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}}, // IP_CT_DIR_REPLY
		}
		on := func(key expr.MetaKey, rest ...expr.Any) []expr.Any {
			return append([]expr.Any{
				&expr.Meta{Key: key, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
			}, rest...)
		}
		// First what has no conntrack tuple (policy_entry.go): INVALID
		// dropped on an interface a policy isolates, counted on
		// c-i<n>-invalid; UNTRACKED judged as a new connection in the
		// direction of the hook it meets, by its own fields (the twins).
		if ifc.Ingress.Isolated || ifc.Egress.Isolated {
			invalid := counterName(prefix + "-" + policyInvalid)
			counters[invalid] = true
			drop := append(ctState(expr.CtStateBitINVALID), countAnd(invalid, verdict(expr.VerdictDrop, ""))...)
			in = append(in, on(expr.MetaKeyIIFNAME, drop...))
			out = append(out, on(expr.MetaKeyOIFNAME, drop...))
		}
		untracked := ctState(expr.CtStateBitUNTRACKED)
		in = append(in, on(expr.MetaKeyIIFNAME, append(untracked, untrackedRule([]expr.Any{to[0]}, false)...)...))
		out = append(out, on(expr.MetaKeyOIFNAME, append(untracked, untrackedRule([]expr.Any{to[1]}, false)...)...))
		// Arriving: a reply of the pod's own connection (egress), or a
		// connection to the pod (ingress); leaving, the other way round.
		in = append(in, on(expr.MetaKeyIIFNAME, append(reply, to[1])...), on(expr.MetaKeyIIFNAME, to[0]))
		out = append(out, on(expr.MetaKeyOIFNAME, append(reply, to[0])...), on(expr.MetaKeyOIFNAME, to[1]))
	}
	spec.counters = make([]string, 0, len(counters))
	for n := range counters {
		spec.counters = append(spec.counters, n)
	}
	slices.Sort(spec.counters)
	for _, n := range pc.names {
		spec.chains = append(spec.chains, chainSpec{name: n, rules: ruleList(pc.rules[n])})
	}
	spec.chains = append(spec.chains,
		baseChain("input", nftables.ChainTypeFilter, unix.NF_INET_LOCAL_IN, 0, ruleList(in)),
		baseChain("output", nftables.ChainTypeFilter, unix.NF_INET_LOCAL_OUT, 0, ruleList(out)))
	return spec
}

// ruleList is a chain's rules of exprs.
func ruleList(exprs [][]expr.Any) []*nftables.Rule {
	out := make([]*nftables.Rule, len(exprs))
	rules := make([]nftables.Rule, len(exprs)) // one allocation for the chain's
	for i, e := range exprs {
		rules[i].Exprs = e
		out[i] = &rules[i]
	}
	return out
}

// nfprotoIs is "meta nfproto P" (unix.NFPROTO_IPV4, _IPV6).
func nfprotoIs(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// famProto is the NFPROTO_ value of a family.
func famProto(v6 bool) byte {
	if v6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// renameRule is r with the sets its clauses name renamed by f.
func renameRule(r policymodel.Rule, f func(policymodel.SetID) policymodel.SetID) policymodel.Rule {
	cls := make([]policymodel.Clause, len(r.Clauses))
	for i, cl := range r.Clauses {
		cl.Peer, cl.DstPorts, cl.Pairs = f(cl.Peer), f(cl.DstPorts), f(cl.Pairs)
		cls[i] = cl
	}
	r.Clauses = cls
	return r
}

// podSets are set s, named name, in table tb (both families) with its
// elements.
func podSets(tb *nftables.Table, name policymodel.SetID, s *policymodel.Set) []setSpec {
	v4, v6 := policyElems(s.Kind, s.Elems())
	return []setSpec{
		{set: policySetObjIn(tb, string(name), s.Kind, policyComment(s.Key), false), elems: v4},
		{set: policySetObjIn(tb, string(name), s.Kind, policyComment(s.Key), true), elems: v6},
	}
}
