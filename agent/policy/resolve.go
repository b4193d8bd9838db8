package policy

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Input is everything Resolve reads.
type Input struct {
	Node                   string
	NodeAddrs              []netip.Addr
	Pods                   []*Pod
	Namespaces             []*Namespace
	Nodes                  []*Node
	NetworkPolicies        []*networkingv1.NetworkPolicy
	ClusterNetworkPolicies []*cnpv1.ClusterNetworkPolicy
	// MultiNetworkPolicies are read as NetworkPolicies (the same spec and
	// semantics, agent/mnp), their IDs "mnp/<namespace>/<name>".
	MultiNetworkPolicies []*networkingv1.NetworkPolicy
}

// Resolve returns the model of in: the policies first (one rebuild), so
// that every pod is matched once against the sets it may be in.
func Resolve(in Input) *policymodel.Model {
	e := NewEngine(in.Node)
	for _, a := range in.NodeAddrs {
		e.nodeAddrs = append(e.nodeAddrs, hostPrefix(a.Unmap()))
	}
	for _, n := range in.Nodes {
		e.nodes[n.Name] = n
	}
	for _, np := range in.NetworkPolicies {
		c := compileNP(np)
		e.policies[c.id] = c
	}
	for _, np := range in.MultiNetworkPolicies {
		c := compileNPAs("mnp", np)
		e.policies[c.id] = c
	}
	for _, cnp := range in.ClusterNetworkPolicies {
		c := compileCNP(cnp)
		e.policies[c.id] = c
	}
	e.rebuild()
	for _, ns := range in.Namespaces {
		e.SetNamespace(ns)
	}
	for _, p := range in.Pods {
		e.SetPod(p)
	}
	return e.Model()
}
