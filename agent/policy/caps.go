package policy

import (
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Caps per policy (docs/policy.md, Caps). Whoever may create a
// NetworkPolicy in a namespace decides how large it is, and every node that
// runs one of its pods compiles it, holds its sets and writes them to the
// kernel; past a cap the policy fails closed for the pods it selects alone
// (closeRules) and an Issue names the field. The caps sit far above what a
// policy written by hand holds and far below what stalls the agent.
const (
	// maxExcepts bounds the ipBlock except entries of a policy, summed
	// over its peers: they are sorted and walked once each.
	maxExcepts = 1024
	// maxPeers bounds the from/to entries of a policy, summed over its
	// rules: each is a set, or a clause of each rule's chain.
	maxPeers = 1024
	// maxClauses bounds the clauses of a policy: per rule its peers times
	// its numeric ports (or protocols), plus its peers once more if it has
	// named ports (all of a rule's named ports are one set: portedSetDef),
	// summed over the rules; each is an nftables rule.
	maxClauses = 4096
	// maxElems bounds the prefixes of a policy's address sets (ipBlocks
	// minus their excepts, a ClusterNetworkPolicy's networks), summed:
	// each is two elements of an interval set in every node's table that
	// runs a pod it selects. A /128 except cuts ::/0 in about 120 prefixes.
	maxElems = 16384
)

// tally counts a policy's entries against the caps.
type tally struct {
	excepts, peers, clauses, elems int
}

// capHit is where a policy passed a cap: the field, the count reached and
// why.
type capHit struct {
	field, value, why string
}

// add adds n to *total at field; a capHit once past limit.
func add(total *int, n, limit int, field, what string) *capHit {
	*total += n
	if *total <= limit {
		return nil
	}
	why := fmt.Sprintf("the policy has %d %s in all, more than the %d the engine takes in one policy (docs/policy.md, Caps)", *total, what, limit)
	return &capHit{field: field, value: fmt.Sprint(*total), why: why}
}

// rule counts a rule (at field) of peers peers (at peersField) and ports
// ports or protocols.
func (t *tally) rule(field, peersField string, peers, ports int) *capHit {
	if h := add(&t.peers, peers, maxPeers, peersField, "peers (from/to entries)"); h != nil {
		return h
	}
	// peers <= maxPeers here: the product does not overflow.
	return add(&t.clauses, max(1, peers)*max(1, ports), maxClauses, field, "clauses (each rule's peers times its ports)")
}

// npPortClauses is what a rule's ports make of each of its peers: a clause
// (an nftables rule) per numeric port, one for all its named ports.
func npPortClauses(ports []networkingv1.NetworkPolicyPort) int {
	n, named := 0, 0
	for _, p := range ports {
		if p.Port != nil && p.Port.Type == intstr.String {
			named = 1
		} else {
			n++
		}
	}
	return n + named
}

// cnpPortClauses is npPortClauses for a ClusterNetworkPolicy's protocols.
func cnpPortClauses(protos []cnpv1.ClusterNetworkPolicyProtocol) int {
	n, named := 0, 0
	for _, p := range protos {
		if p.DestinationNamedPort != "" {
			named = 1
		} else {
			n++
		}
	}
	return n + named
}

// npOverCap checks a NetworkPolicy's shape against the caps before it is
// compiled (the prefixes its ipBlocks leave are counted as they are cut).
func npOverCap(spec *networkingv1.NetworkPolicySpec) *capHit {
	var t tally
	check := func(field, peersName string, peers []networkingv1.NetworkPolicyPeer, ports int) *capHit {
		if h := t.rule(field, field+"."+peersName, len(peers), ports); h != nil {
			return h
		}
		for j, p := range peers {
			if p.IPBlock == nil {
				continue
			}
			f := fmt.Sprintf("%s.%s[%d].ipBlock.except", field, peersName, j)
			if h := add(&t.excepts, len(p.IPBlock.Except), maxExcepts, f, "ipBlock except entries"); h != nil {
				return h
			}
		}
		return nil
	}
	for i, r := range spec.Ingress {
		if h := check(fmt.Sprintf("spec.ingress[%d]", i), "from", r.From, npPortClauses(r.Ports)); h != nil {
			return h
		}
	}
	for i, r := range spec.Egress {
		if h := check(fmt.Sprintf("spec.egress[%d]", i), "to", r.To, npPortClauses(r.Ports)); h != nil {
			return h
		}
	}
	return nil
}

// cnpOverCap is npOverCap for a ClusterNetworkPolicy; its networks, which
// are not cut, are counted here as the prefixes of its sets.
func cnpOverCap(spec *cnpv1.ClusterNetworkPolicySpec) *capHit {
	var t tally
	for i, r := range spec.Ingress {
		f := fmt.Sprintf("spec.ingress[%d]", i)
		if h := t.rule(f, f+".from", len(r.From), cnpPortClauses(r.Protocols)); h != nil {
			return h
		}
	}
	for i, r := range spec.Egress {
		f := fmt.Sprintf("spec.egress[%d]", i)
		if h := t.rule(f, f+".to", len(r.To), cnpPortClauses(r.Protocols)); h != nil {
			return h
		}
		for j, p := range r.To {
			nf := fmt.Sprintf("%s.to[%d].networks", f, j)
			if h := add(&t.elems, len(p.Networks), maxElems, nf, "networks"); h != nil {
				return h
			}
		}
	}
	return nil
}

// overCap records that the policy passed a cap (the first one only) and
// marks it for closeRules; closed says what the policy does instead.
func (b *builder) overCap(h *capHit, closed string) {
	if b.capped {
		return
	}
	b.capped = true
	b.issue(h.field, h.value, h.why+"; "+closed+"; split the policy or use fewer, wider entries")
}

// The closed forms of a policy past a cap, for the pods it selects.
const (
	npCapClosed  = "the policy isolates the pods it selects in its directions and allows them nothing"
	cnpCapClosed = "its Accept rules match nothing and its Deny and Pass rules deny everything to the pods it selects"
)

// closeRules turns a capped policy into its closed form: a NetworkPolicy
// keeps its isolation with no rule (nothing allowed); a
// ClusterNetworkPolicy's Accept rules match nothing and its Deny and Pass
// rules deny everything. Only the subject's set is left: the policy's
// other sets, the costly part, are dropped.
func (b *builder) closeRules(subject policymodel.SetID) {
	for _, p := range b.c.dirs {
		if p == nil {
			continue
		}
		if p.Tier == policymodel.TierNetworkPolicy {
			p.Rules = nil
			continue
		}
		for i, r := range p.Rules {
			if r.Action == policymodel.Accept {
				p.Rules[i] = policymodel.Rule{ID: r.ID, Name: r.Name, Action: policymodel.Accept}
			} else {
				p.Rules[i] = denyAll(r.ID, r.Name)
			}
		}
	}
	b.c.defs = map[policymodel.SetID]*setDef{subject: b.c.defs[subject]}
}
