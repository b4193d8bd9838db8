package policy

import (
	"fmt"
	"net/netip"
	"slices"

	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// compileCNP compiles a ClusterNetworkPolicy. It takes part in a direction
// if it has rules of that direction; its rules are evaluated in order within
// its tier, by priority (then name: the API leaves ties to the
// implementation).
//
// What cannot be expressed fails closed as the API describes for peers:
// in an Accept rule the part matches nothing; a Deny or Pass rule with such
// a part denies everything; a subject that cannot be read takes every pod,
// and the policy then only denies. Past a cap (caps.go) every rule takes
// that closed form, its peers unread.
func compileCNP(cnp *cnpv1.ClusterNetworkPolicy) *compiled {
	b := newBuilder(policymodel.ClusterPolicyID(cnp.Name))
	spec := &cnp.Spec
	tier := policymodel.TierAdmin
	acceptOK := true
	switch spec.Tier {
	case cnpv1.AdminTier:
	case cnpv1.BaselineTier:
		tier = policymodel.TierBaseline
	default:
		b.issue("spec.tier", string(spec.Tier), "not Admin or Baseline; the policy is evaluated in the Admin tier without its Accept rules")
		acceptOK = false
	}
	sel, subjectOK := b.cnpSubject(&spec.Subject)
	b.c.subject = sel
	subject := b.set(podSetDef(sel))
	if h := cnpOverCap(spec); h != nil {
		b.overCap(h, cnpCapClosed) // the rules are compiled without their peers
	}
	for d, n := range [2]int{len(spec.Ingress), len(spec.Egress)} {
		if n == 0 {
			continue
		}
		dir := policymodel.Direction(d)
		p := &policymodel.Policy{ID: b.c.id, Tier: tier, Priority: spec.Priority, Subject: subject}
		for i := 0; i < n; i++ {
			var r policymodel.Rule
			if dir == policymodel.Ingress {
				in := &spec.Ingress[i]
				var peers []cnpv1.ClusterNetworkPolicyEgressPeer
				protos := in.Protocols
				if b.capped {
					protos = nil
				}
				for j := 0; j < len(in.From) && !b.capped; j++ {
					peers = append(peers, cnpv1.ClusterNetworkPolicyEgressPeer{Namespaces: in.From[j].Namespaces, Pods: in.From[j].Pods})
				}
				r = b.cnpRule(dir, i, in.Name, in.Action, fmt.Sprintf("spec.ingress[%d]", i), "from", peers, protos)
			} else {
				e := &spec.Egress[i]
				peers, protos := e.To, e.Protocols
				if b.capped {
					peers, protos = nil, nil
				}
				r = b.cnpRule(dir, i, e.Name, e.Action, fmt.Sprintf("spec.egress[%d]", i), "to", peers, protos)
			}
			switch {
			case !subjectOK:
				r = denyAll(r.ID, r.Name)
			case r.Action == policymodel.Accept && !acceptOK:
				r.Clauses = nil
			}
			p.Rules = append(p.Rules, r)
		}
		b.c.dirs[d] = p
	}
	if b.capped {
		b.closeRules(subject)
	}
	return b.finish()
}

// cnpSubject compiles the subject; one that cannot be read selects every
// pod (false).
func (b *builder) cnpSubject(s *cnpv1.ClusterNetworkPolicySubject) (podSel, bool) {
	all := podSel{nsSel: everything, podSel: everything, local: true}
	switch {
	case (s.Namespaces == nil) == (s.Pods == nil):
		b.issue("spec.subject", "", "exactly one of namespaces and pods is set; the policy selects every pod and only denies")
		return all, false
	case s.Namespaces != nil:
		ns, err := compileSelector(s.Namespaces)
		if err != nil {
			b.issue("spec.subject.namespaces", jsonText(s.Namespaces), err.Error()+"; the policy selects every pod and only denies")
			return all, false
		}
		return podSel{nsSel: ns, podSel: everything, local: true}, true
	}
	ps, why := namespacedPod(s.Pods)
	if why != "" {
		b.issue("spec.subject.pods", jsonText(s.Pods), why+"; the policy selects every pod and only denies")
		return all, false
	}
	ps.local = true
	return ps, true
}

// namespacedPod compiles a pods selector (namespaces and pods), or says
// why it cannot.
func namespacedPod(p *cnpv1.NamespacedPod) (podSel, string) {
	ns, err := compileSelector(&p.NamespaceSelector)
	if err != nil {
		return podSel{}, "namespaceSelector: " + err.Error()
	}
	ps, err := compileSelector(&p.PodSelector)
	if err != nil {
		return podSel{}, "podSelector: " + err.Error()
	}
	return podSel{nsSel: ns, podSel: ps}, ""
}

// cnpRule compiles rule i of a direction (ingress peers are given as
// egress peers: they are a subset).
func (b *builder) cnpRule(dir policymodel.Direction, i int, name string, action cnpv1.ClusterNetworkPolicyRuleAction, field, peersName string, peers []cnpv1.ClusterNetworkPolicyEgressPeer, protos []cnpv1.ClusterNetworkPolicyProtocol) policymodel.Rule {
	r := policymodel.Rule{ID: policymodel.NewRuleID(b.c.id, dir, i), Name: name}
	switch action {
	case cnpv1.ClusterNetworkPolicyRuleActionAccept:
		r.Action = policymodel.Accept
	case cnpv1.ClusterNetworkPolicyRuleActionDeny:
		r.Action = policymodel.Deny
	case cnpv1.ClusterNetworkPolicyRuleActionPass:
		r.Action = policymodel.Pass
	default:
		b.issue(field+".action", string(action), "not Accept, Deny or Pass; the rule denies everything")
		return denyAll(r.ID, name)
	}
	closed := func(f, v, why string) bool {
		if r.Action == policymodel.Accept {
			b.issue(f, v, why+"; the Accept rule matches nothing for it")
			return true
		}
		b.issue(f, v, why+"; the "+r.Action.String()+" rule denies everything")
		return false
	}
	var ps []peer
	for j := range peers {
		f := fmt.Sprintf("%s.%s[%d]", field, peersName, j)
		p, why := cnpPeer(&peers[j])
		if why == "" && p.domains != nil && r.Action != policymodel.Accept {
			why = "domainNames peers are for Accept rules only (the API says so)"
		}
		if why != "" {
			if !closed(f, "", why) {
				return denyAll(r.ID, name)
			}
			continue
		}
		ps = append(ps, p)
	}
	spec := portSpec{any: len(protos) == 0}
	for j := range protos {
		f := fmt.Sprintf("%s.protocols[%d]", field, j)
		if why := cnpProtocol(&protos[j], &spec); why != "" {
			if !closed(f, "", why) {
				return denyAll(r.ID, name)
			}
		}
	}
	r.Clauses = b.clauses(dir, b.c.subject, ps, spec)
	return r
}

// cnpPeer compiles one peer, or says why it cannot.
func cnpPeer(p *cnpv1.ClusterNetworkPolicyEgressPeer) (peer, string) {
	n := 0
	for _, set := range []bool{p.Namespaces != nil, p.Pods != nil, p.Networks != nil, p.Nodes != nil, p.DomainNames != nil} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return peer{}, "a peer sets exactly one field (a newer CRD than this engine knows?)"
	case p.Nodes != nil:
		s, err := compileSelector(p.Nodes)
		if err != nil {
			return peer{}, "nodes: " + err.Error()
		}
		return peer{nodes: &s}, ""
	case p.DomainNames != nil:
		var names []string
		for i, n := range p.DomainNames {
			name, ok := domainName(string(n))
			if !ok {
				return peer{}, fmt.Sprintf("domainNames[%d] %q: not a domain name, or *. and one", i, n)
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return peer{domains: names}, ""
	case p.Namespaces != nil:
		ns, err := compileSelector(p.Namespaces)
		if err != nil {
			return peer{}, "namespaces: " + err.Error()
		}
		return peer{pods: &podSel{nsSel: ns, podSel: everything}}, ""
	case p.Pods != nil:
		s, why := namespacedPod(p.Pods)
		if why != "" {
			return peer{}, "pods." + why
		}
		return peer{pods: &s}, ""
	}
	var ps []netip.Prefix
	for _, c := range p.Networks {
		pfx, err := parsePrefix(string(c))
		if err != nil {
			return peer{}, "networks: " + err.Error()
		}
		ps = append(ps, pfx)
	}
	return peer{cidrs: staticSetDef(ps)}, ""
}

// cnpProtocol adds one protocol entry to spec, or says why it cannot.
func cnpProtocol(p *cnpv1.ClusterNetworkPolicyProtocol, spec *portSpec) string {
	type one struct {
		proto policymodel.Protocol
		port  *cnpv1.Port
	}
	var set []one
	if p.TCP != nil {
		set = append(set, one{policymodel.TCP, p.TCP.DestinationPort})
	}
	if p.UDP != nil {
		set = append(set, one{policymodel.UDP, p.UDP.DestinationPort})
	}
	if p.SCTP != nil {
		set = append(set, one{policymodel.SCTP, p.SCTP.DestinationPort})
	}
	if p.DestinationNamedPort != "" {
		if len(set) > 0 {
			return "a protocol entry sets exactly one field"
		}
		spec.named = append(spec.named, namedPort{name: p.DestinationNamedPort})
		return ""
	}
	if len(set) != 1 {
		return "a protocol entry sets exactly one field"
	}
	o := set[0]
	switch {
	case o.port == nil:
		spec.ranges = append(spec.ranges, policymodel.PortRange{Proto: o.proto, First: 0, Last: 65535})
	case (o.port.Number != 0) == (o.port.Range != nil):
		return "a destinationPort sets exactly one of number and range"
	case o.port.Range != nil:
		end := o.port.Range.End
		r, why := portRange(o.proto, o.port.Range.Start, &end)
		if why != "" {
			return why
		}
		spec.ranges = append(spec.ranges, r)
	default:
		r, why := portRange(o.proto, o.port.Number, nil)
		if why != "" {
			return why
		}
		spec.ranges = append(spec.ranges, r)
	}
	return ""
}
