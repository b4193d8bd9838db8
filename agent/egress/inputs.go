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
		if err != nil || a.Zone() != "" {
			out.Invalid = append(out.Invalid, fmt.Sprintf("spec.egressIPs[%d] %q: not an IPv4 or IPv6 address (give one, e.g. 192.0.2.10 or 2001:db8::10)", i, s))
			continue
		}
		out.IPs = append(out.IPs, a.Unmap())
	}
	if len(g.Spec.EgressIPs) == 0 {
		out.Invalid = append(out.Invalid, "spec.egressIPs: empty (give one address or more)")
	}
	for i, s := range g.Spec.DestinationCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			out.Invalid = append(out.Invalid, fmt.Sprintf("spec.destinationCIDRs[%d] %q: not a CIDR (give one, e.g. 198.51.100.0/24 or 2001:db8:100::/48)", i, s))
			continue
		}
		out.Destinations = append(out.Destinations, p.Masked())
	}
	// An address whose family no destination has would send everything
	// (no destination: all) where the spec meant some.
	if len(out.Destinations) > 0 {
		for i, a := range out.IPs {
			if len(sameFamily(out.Destinations, a)) == 0 {
				fam := "IPv4"
				if a.Is6() {
					fam = "IPv6"
				}
				out.Invalid = append(out.Invalid, fmt.Sprintf("spec.egressIPs[%d] %s: spec.destinationCIDRs has no %s CIDR (add one, or leave destinationCIDRs out for every destination)", i, a, fam))
			}
		}
	}
	return out
}

// readPod is p for the plan (its namespace, name, node, labels and
// addresses, IPv4 and IPv6); false for a pod the plan leaves out (host
// network, finished, no address yet).
func readPod(p *cluster.Pod) (Pod, bool) {
	if p.HostNetwork || p.Node == "" || p.Done {
		return Pod{}, false
	}
	out := Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Node, Labels: p.Labels}
	for _, a := range p.IPs {
		if a.IsValid() {
			out.IPs = append(out.IPs, a.Unmap())
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
