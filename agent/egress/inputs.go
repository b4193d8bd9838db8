//go:build !nokube

package egress

import (
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/agent/addrhold"
	"github.com/cnibox/cnibox/agent/cluster"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Read compiles g for the plan, naming each field it cannot use.
func Read(g *EgressGateway) Gateway {
	out := Gateway{Name: g.Name}
	selector := func(field string, s *metav1.LabelSelector) labels.Selector {
		if s == nil {
			return labels.Everything()
		}
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			out.Invalid = append(out.Invalid, fmt.Sprintf("%s: %v", field, err))
			return labels.Nothing()
		}
		return sel
	}
	out.PodSelector = selector("spec.podSelector", g.Spec.PodSelector)
	out.NamespaceSelector = selector("spec.namespaceSelector", g.Spec.NamespaceSelector)
	out.NodeSelector = selector("spec.nodeSelector", g.Spec.NodeSelector)
	for i, s := range g.Spec.EgressIPs {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			out.Invalid = append(out.Invalid, fmt.Sprintf("spec.egressIPs[%d] %q: not an IPv4 address (IPv6 egress addresses are not supported yet)", i, s))
			continue
		}
		out.IPs = append(out.IPs, a)
	}
	if len(g.Spec.EgressIPs) == 0 {
		out.Invalid = append(out.Invalid, "spec.egressIPs: empty (give one address or more)")
	}
	for i, s := range g.Spec.DestinationCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			out.Invalid = append(out.Invalid, fmt.Sprintf("spec.destinationCIDRs[%d] %q: not an IPv4 CIDR", i, s))
			continue
		}
		out.Destinations = append(out.Destinations, p.Masked())
	}
	return out
}

// readPod is p for the plan (its namespace, name, node, labels and IPv4
// addresses); false for a pod the plan leaves out (host network, finished,
// no IPv4 address yet).
func readPod(p *cluster.Pod) (Pod, bool) {
	if p.HostNetwork || p.Node == "" || p.Done {
		return Pod{}, false
	}
	out := Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Node, Labels: p.Labels}
	for _, a := range p.IPs {
		if a.Is4() {
			out.IPs = append(out.IPs, a)
		}
	}
	return out, len(out.IPs) > 0
}

// readNode is n for the plan: its labels and the networks its agent
// publishes.
func readNode(n *cluster.Node) Node {
	return Node{Name: n.Name, Labels: n.Labels, Networks: ParseNetworks(n.EgressNetworks)}
}

// ParseNetworks reads NetworksAnnotation's value (addrhold's).
func ParseNetworks(v string) []netip.Prefix { return addrhold.ParseNetworks(v) }

// FormatNetworks is NetworksAnnotation's value for ps (addrhold's).
func FormatNetworks(ps []netip.Prefix) string { return addrhold.FormatNetworks(ps) }
