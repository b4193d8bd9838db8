package mnp

import (
	"cmp"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// Pod is the agent's pod (agent/cluster): mnp reads what the policy
// engine reads (its IPs are its primary network's, unused here) and its
// secondary attachments.
type Pod = cluster.Pod

// Policy is a MultiNetworkPolicy read as the NetworkPolicy it is, and the
// networks it is for ("<namespace>/<name>").
type Policy struct {
	NP       *networkingv1.NetworkPolicy
	Networks []string
}

// Input is everything Resolve reads.
type Input struct {
	Node       string
	Pods       []*Pod
	Namespaces []*policy.Namespace
	Policies   []*Policy
}

// Resolve returns, by "<namespace>/<name>", the table of each pod of the
// node that a policy isolates on one of its interfaces; the node's other
// pods have none. Each network a policy is for is resolved on its own, by
// the NetworkPolicy engine, over the pods' addresses on that network: a
// selector takes a pod as a peer with its addresses there, and a pod
// without an address on the network is no peer of it.
func Resolve(in Input) map[string]*nft.PodPolicy {
	byNet := map[string][]*networkingv1.NetworkPolicy{}
	for _, p := range in.Policies {
		for _, n := range p.Networks {
			if !slices.Contains(byNet[n], p.NP) {
				byNet[n] = append(byNet[n], p.NP)
			}
		}
	}
	out := map[string]*nft.PodPolicy{}
	nets := make([]string, 0, len(byNet))
	for n := range byNet {
		nets = append(nets, n)
	}
	slices.Sort(nets)
	for _, network := range nets {
		var pods []*policy.Pod
		type local struct {
			key   string
			iface string
			ips   []netip.Addr
		}
		var locals []local
		for _, p := range in.Pods {
			// Every address of the pod on the network (two interfaces on
			// one network are one peer), each interface with its own.
			var ips []netip.Addr
			for _, a := range p.Attachments {
				if a.Network != network || len(a.IPs) == 0 {
					continue
				}
				ips = append(ips, a.IPs...)
				if p.Node == in.Node && !p.HostNetwork && !p.Done {
					locals = append(locals, local{key: p.Key(), iface: a.Iface, ips: a.IPs})
				}
			}
			if len(ips) > 0 {
				pp := *p
				pp.IPs = ips
				pods = append(pods, &pp)
			}
		}
		if len(locals) == 0 {
			continue // no pod of the node on it
		}
		m := policy.Resolve(policy.Input{Node: in.Node, Pods: pods, Namespaces: in.Namespaces, MultiNetworkPolicies: byNet[network]})
		for _, l := range locals {
			ifc := nft.PodIface{Name: l.iface}
			sets := map[policymodel.SetID]bool{}
			ifc.Ingress = podDir(m, &m.Ingress, l.ips, sets)
			ifc.Egress = podDir(m, &m.Egress, l.ips, sets)
			if !ifc.Ingress.Isolated && !ifc.Egress.Isolated {
				continue
			}
			for id := range sets {
				if s := m.Sets[id]; s != nil {
					ifc.Sets = append(ifc.Sets, s)
				}
			}
			slices.SortFunc(ifc.Sets, func(a, b *policymodel.Set) int { return cmp.Compare(a.ID, b.ID) })
			pp := out[l.key]
			if pp == nil {
				pp = &nft.PodPolicy{}
				out[l.key] = pp
			}
			pp.Ifaces = append(pp.Ifaces, ifc)
		}
	}
	for _, pp := range out {
		slices.SortFunc(pp.Ifaces, func(a, b nft.PodIface) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

// podDir is a local pod's part of one direction of m: isolated when the
// direction's isolated set holds one of its addresses, and the policies
// whose subject does; the sets their clauses name are added to sets.
func podDir(m *policymodel.Model, t *policymodel.Tiers, ips []netip.Addr, sets map[policymodel.SetID]bool) nft.PodDir {
	has := func(id policymodel.SetID) bool {
		s := m.Sets[id]
		return s != nil && slices.ContainsFunc(ips, s.Contains)
	}
	var d nft.PodDir
	if t.Isolated == "" || !has(t.Isolated) {
		return d
	}
	d.Isolated = true
	for _, p := range t.NetworkPolicy {
		if !has(p.Subject) {
			continue
		}
		d.Policies = append(d.Policies, p)
		for _, r := range p.Rules {
			for _, cl := range r.Clauses {
				for _, id := range []policymodel.SetID{cl.Peer, cl.DstPorts} {
					if id != "" {
						sets[id] = true
					}
				}
			}
		}
	}
	return d
}

// PolicyTypesAsTheAnchor gives spec the directions multi-networkpolicy-
// iptables enforces: without policyTypes, ingress when it has ingress
// rules and egress when it has egress rules. NetworkPolicy (and the
// CRD's text, copied from it) would isolate ingress whatever the rules;
// the anchor does not, its e2e tests check that (simple-v4-egress: a
// policy with egress rules alone leaves its pods open to every client),
// and clusters moving from it keep their behaviour. It reports false for
// a spec that then isolates nothing (no policyTypes, no rules): such a
// policy is for no direction, and is left out.
func PolicyTypesAsTheAnchor(spec *networkingv1.NetworkPolicySpec) bool {
	if len(spec.PolicyTypes) > 0 {
		return true
	}
	if len(spec.Ingress) > 0 {
		spec.PolicyTypes = append(spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
	if len(spec.Egress) > 0 {
		spec.PolicyTypes = append(spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	}
	return len(spec.PolicyTypes) > 0
}
