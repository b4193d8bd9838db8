package policy

import (
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// compiled is one policy as the engine keeps it: its part in each direction
// (nil: none), the sets those use, and what could not be expressed.
type compiled struct {
	id   string
	dirs [2]*policymodel.Policy
	defs map[policymodel.SetID]*setDef
	// isolates says in which directions a NetworkPolicy isolates the pods
	// subject selects (the NetworkPolicy tier's Isolated sets).
	isolates [2]bool
	subject  podSel
	// domains are its domainNames peers (Rules.Domains).
	domains []policymodel.Domains
	issues  []policymodel.Issue
	// ns is the namespace of a namespaced policy (a NetworkPolicy, a
	// MultiNetworkPolicy, a staged NetworkPolicy), "" for a cluster's;
	// clauses counts its clauses: what its namespace's caps add up
	// (nscaps.go).
	ns      string
	clauses int
}

// builder collects a policy's sets and issues while it is compiled.
type builder struct {
	c *compiled
	// room is how many prefixes the policy's ipBlocks may still leave
	// (maxElems in all); capped reports that a cap was passed (caps.go).
	room   int
	capped bool
}

func newBuilder(id string) *builder {
	return &builder{c: &compiled{id: id, defs: map[policymodel.SetID]*setDef{}}, room: maxElems}
}

// set registers d and returns its ID.
func (b *builder) set(d *setDef) policymodel.SetID {
	id := policymodel.SetIDOf(d.key)
	b.c.defs[id] = d
	return id
}

// issue records that field (with value) could not be expressed.
func (b *builder) issue(field, value, reason string) {
	b.c.issues = append(b.c.issues, policymodel.Issue{Policy: b.c.id, Field: field, Value: value, Reason: reason})
}

// finish marks the policy FailClosed if it has issues and returns it.
func (b *builder) finish() *compiled {
	for _, p := range b.c.dirs {
		if p == nil {
			continue
		}
		p.FailClosed = len(b.c.issues) > 0
		for _, r := range p.Rules {
			b.c.clauses += len(r.Clauses)
		}
	}
	return b.c
}

// peer is one peer of a rule: any address, the pods a selector takes,
// static prefixes, or the addresses of the nodes a selector takes.
type peer struct {
	any     bool
	pods    *podSel
	cidrs   *setDef
	nodes   *selector
	domains []string // a domainNames peer's names, lowercased, sorted
}

// namedPort is a port name and its protocol (0: any).
type namedPort struct {
	name  string
	proto policymodel.Protocol
}

// portSpec is a rule's ports: any, or numeric ranges and named ports.
type portSpec struct {
	any    bool
	ranges []policymodel.PortRange
	named  []namedPort
}

// allPods selects every selectable pod of the cluster.
var allPods = podSel{nsSel: everything, podSel: everything}

// clauses are the clauses of a rule of direction dir whose subject is
// subject, from its peers and ports. Numeric ports are matched on the
// packet; the named ports are resolved per destination pod (the subject's
// pods for ingress, the peer's for egress) into one Ported set: a peer's
// clause for all of them, not one each.
func (b *builder) clauses(dir policymodel.Direction, subject podSel, peers []peer, ps portSpec) []policymodel.Clause {
	var out []policymodel.Clause
	for _, p := range peers {
		var id policymodel.SetID
		switch {
		case p.pods != nil:
			id = b.set(podSetDef(*p.pods))
		case p.cidrs != nil:
			id = b.set(p.cidrs)
		case p.nodes != nil:
			id = b.set(nodeSetDef(*p.nodes))
		}
		var pairs policymodel.SetID
		if p.domains != nil {
			// Any address, as long as the pod resolved it for a name.
			pairs = b.set(pairsSetDef(p.domains))
			b.c.domains = append(b.c.domains, policymodel.Domains{Names: p.domains, Set: pairs, Subject: b.set(podSetDef(subject))})
		}
		if ps.any {
			out = append(out, policymodel.Clause{Peer: id, Pairs: pairs})
			continue
		}
		if len(ps.ranges) > 0 {
			out = append(out, policymodel.Clause{Peer: id, Ports: ps.ranges, Pairs: pairs})
		}
		switch {
		case len(ps.named) == 0:
		case dir == policymodel.Ingress:
			out = append(out, policymodel.Clause{Peer: id, DstPorts: b.set(portedSetDef(subject, ps.named))})
		case p.domains != nil: // an address of a pod that has the port, and was resolved
			out = append(out, policymodel.Clause{DstPorts: b.set(portedSetDef(allPods, ps.named)), Pairs: pairs})
		case p.pods != nil: // the peer's own named ports
			out = append(out, policymodel.Clause{DstPorts: b.set(portedSetDef(*p.pods, ps.named))})
		default: // an address of a pod that has the port
			out = append(out, policymodel.Clause{Peer: id, DstPorts: b.set(portedSetDef(allPods, ps.named))})
		}
	}
	return out
}

// denyAll is the closed form of a Deny or Pass rule that cannot be
// expressed: it denies everything.
func denyAll(id policymodel.RuleID, name string) policymodel.Rule {
	return policymodel.Rule{ID: id, Name: name, Action: policymodel.Deny, Clauses: []policymodel.Clause{{}}}
}

// portRange checks a numeric port and its optional end, or says why it
// cannot be expressed.
func portRange(proto policymodel.Protocol, first int32, end *int32) (policymodel.PortRange, string) {
	if first < 1 || first > 65535 {
		return policymodel.PortRange{}, fmt.Sprintf("the port %d is not within 1-65535", first)
	}
	last := first
	if end != nil {
		if *end < first || *end > 65535 {
			return policymodel.PortRange{}, fmt.Sprintf("the port range %d-%d does not end at or after its start within 65535", first, *end)
		}
		last = *end
	}
	return policymodel.PortRange{Proto: proto, First: uint16(first), Last: uint16(last)}, ""
}

// parsePrefix parses a CIDR; the address must be the network's (as the
// API's validation asks), else the prefix is masked.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	out := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr())).Masked()
	if !out.IsValid() {
		return netip.Prefix{}, fmt.Errorf("%s: an IPv4-mapped prefix shorter than /96", s)
	}
	return out, nil
}

// unmapBits is what an IPv4-mapped IPv6 address' prefix length loses when
// unmapped.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}
