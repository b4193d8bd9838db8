package policy

import (
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// compileNP compiles a NetworkPolicy. A pod it selects is isolated in each
// direction of its policyTypes (none given: ingress, and egress if it has
// egress rules), and allowed what one of its rules of that direction allows.
// Past a cap (caps.go) it isolates them and allows nothing.
func compileNP(np *networkingv1.NetworkPolicy) *compiled {
	return compileNPAs(policymodel.KindNetworkPolicy, np)
}

// compileNPAs is compileNP for a kind of policy with NetworkPolicy's spec
// and semantics, whose IDs are "<kind>/<namespace>/<name>" (a
// MultiNetworkPolicy's: "mnp").
func compileNPAs(kind string, np *networkingv1.NetworkPolicy) *compiled {
	b := newBuilder(policymodel.NamespacedPolicyID(kind, np.Namespace, np.Name))
	b.c.ns = np.Namespace
	spec := &np.Spec
	sel, err := compileSelector(&spec.PodSelector)
	subjectOK := err == nil
	if !subjectOK {
		b.issue("spec.podSelector", jsonText(&spec.PodSelector), err.Error()+"; the policy isolates every pod of its namespace and allows nothing")
		sel = everything
	}
	b.c.subject = podSel{ns: np.Namespace, podSel: sel, local: true}
	subject := b.set(podSetDef(b.c.subject))

	dirs := [2]bool{policymodel.Ingress: true, policymodel.Egress: len(spec.Egress) > 0}
	if len(spec.PolicyTypes) > 0 {
		dirs = [2]bool{}
		for i, t := range spec.PolicyTypes {
			switch t {
			case networkingv1.PolicyTypeIngress:
				dirs[policymodel.Ingress] = true
			case networkingv1.PolicyTypeEgress:
				dirs[policymodel.Egress] = true
			default:
				b.issue(fmt.Sprintf("spec.policyTypes[%d]", i), string(t), "not Ingress or Egress; the policy isolates in both directions")
				dirs = [2]bool{true, true}
			}
		}
	}
	b.c.isolates = dirs
	if h := npOverCap(spec); h != nil {
		b.overCap(h, npCapClosed)
	}
	for d := range dirs {
		if !dirs[d] {
			continue
		}
		dir := policymodel.Direction(d)
		p := &policymodel.Policy{ID: b.c.id, Tier: policymodel.TierNetworkPolicy, Subject: subject}
		if subjectOK && !b.capped {
			if dir == policymodel.Ingress {
				for i, r := range spec.Ingress {
					field := fmt.Sprintf("spec.ingress[%d]", i)
					p.Rules = append(p.Rules, b.npRule(np.Namespace, dir, i, field+".from", r.From, field+".ports", r.Ports))
				}
			} else {
				for i, r := range spec.Egress {
					field := fmt.Sprintf("spec.egress[%d]", i)
					p.Rules = append(p.Rules, b.npRule(np.Namespace, dir, i, field+".to", r.To, field+".ports", r.Ports))
				}
			}
		}
		b.c.dirs[d] = p
	}
	if b.capped {
		b.closeRules(subject)
	}
	return b.finish()
}

// npRule compiles rule i of a direction.
func (b *builder) npRule(ns string, dir policymodel.Direction, i int, peersField string, peers []networkingv1.NetworkPolicyPeer, portsField string, ports []networkingv1.NetworkPolicyPort) policymodel.Rule {
	r := policymodel.Rule{ID: policymodel.NewRuleID(b.c.id, dir, i), Action: policymodel.Allow}
	var ps []peer
	if len(peers) == 0 {
		ps = []peer{{any: true}}
	}
	for j := range peers {
		if p, ok := b.npPeer(ns, fmt.Sprintf("%s[%d]", peersField, j), &peers[j]); ok {
			ps = append(ps, p)
		}
	}
	spec := portSpec{any: len(ports) == 0}
	for j := range ports {
		b.npPort(fmt.Sprintf("%s[%d]", portsField, j), &ports[j], &spec)
	}
	r.Clauses = b.clauses(dir, b.c.subject, ps, spec)
	return r
}

// npPeer compiles one peer; a peer that cannot be expressed matches nothing
// (false).
func (b *builder) npPeer(ns, field string, p *networkingv1.NetworkPolicyPeer) (peer, bool) {
	if p.IPBlock != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			b.issue(field, "ipBlock with a selector", "a peer is an ipBlock or selectors, not both; the peer matches nothing")
			return peer{}, false
		}
		cidr, err := parsePrefix(p.IPBlock.CIDR)
		if err != nil {
			b.issue(field+".ipBlock.cidr", p.IPBlock.CIDR, err.Error()+"; the peer matches nothing")
			return peer{}, false
		}
		var excepts []netip.Prefix
		for k, e := range p.IPBlock.Except {
			ep, err := parsePrefix(e)
			if err != nil {
				b.issue(fmt.Sprintf("%s.ipBlock.except[%d]", field, k), e, err.Error()+"; the peer matches nothing")
				return peer{}, false
			}
			excepts = append(excepts, ep)
		}
		ps, ok := minus(cidr, excepts, b.room)
		if !ok {
			b.overCap(&capHit{field: field + ".ipBlock", value: fmt.Sprintf("%s except %d entries", p.IPBlock.CIDR, len(excepts)),
				why: fmt.Sprintf("the policy's ipBlocks minus their excepts need more than the %d prefixes the engine takes in one policy (docs/policy.md, Caps)", maxElems)}, npCapClosed)
			return peer{}, false
		}
		b.room -= len(ps)
		return peer{cidrs: staticSetDef(ps)}, true
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		b.issue(field, "{}", "a peer has an ipBlock, a podSelector or a namespaceSelector; the peer matches nothing")
		return peer{}, false
	}
	s := podSel{ns: ns, podSel: everything}
	if p.PodSelector != nil {
		sel, err := compileSelector(p.PodSelector)
		if err != nil {
			b.issue(field+".podSelector", jsonText(p.PodSelector), err.Error()+"; the peer matches nothing")
			return peer{}, false
		}
		s.podSel = sel
	}
	if p.NamespaceSelector != nil {
		sel, err := compileSelector(p.NamespaceSelector)
		if err != nil {
			b.issue(field+".namespaceSelector", jsonText(p.NamespaceSelector), err.Error()+"; the peer matches nothing")
			return peer{}, false
		}
		s.ns, s.nsSel = "", sel
	}
	return peer{pods: &s}, true
}

// npPort adds one port to spec; one that cannot be expressed is left out
// (the rule matches no port for it).
func (b *builder) npPort(field string, p *networkingv1.NetworkPolicyPort, spec *portSpec) {
	proto := policymodel.TCP
	if p.Protocol != nil {
		var ok bool
		if proto, ok = protocolOf(*p.Protocol); !ok {
			b.issue(field+".protocol", string(*p.Protocol), "not TCP, UDP or SCTP; the rule matches no port for it")
			return
		}
	}
	switch {
	case p.Port == nil:
		if p.EndPort != nil {
			b.issue(field+".endPort", fmt.Sprint(*p.EndPort), "endPort needs a numeric port; the rule matches no port for it")
			return
		}
		spec.ranges = append(spec.ranges, policymodel.PortRange{Proto: proto, First: 0, Last: 65535})
	case p.Port.Type == intstr.String:
		if p.EndPort != nil {
			b.issue(field+".endPort", fmt.Sprint(*p.EndPort), "endPort needs a numeric port, not the named port "+p.Port.StrVal+"; the rule matches no port for it")
			return
		}
		if p.Port.StrVal == "" {
			b.issue(field+".port", "", "an empty port name; the rule matches no port for it")
			return
		}
		spec.named = append(spec.named, namedPort{name: p.Port.StrVal, proto: proto})
	default:
		r, why := portRange(proto, p.Port.IntVal, p.EndPort)
		if why != "" {
			b.issue(field+".port", p.Port.String(), why+"; the rule matches no port for it")
			return
		}
		spec.ranges = append(spec.ranges, r)
	}
}
