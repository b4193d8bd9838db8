package policy

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Pod is what the engine reads of a Pod: a few hundred bytes where the API
// object is kilobytes, since the agent holds every pod of the cluster (any
// of them can be a peer).
type Pod struct {
	Namespace, Name string
	Node            string // spec.nodeName
	Labels          map[string]string
	IPs             []netip.Addr // status.podIPs
	// HostNetwork pods share their node's addresses: no policy selects
	// them, and no selector takes them as a peer; traffic from or to them
	// is the node's (an ipBlock matches it).
	HostNetwork bool
	// Done pods (phase Succeeded or Failed) hold no address any more: it
	// may already be another pod's.
	Done  bool
	Ports []NamedPort // the containers' named ports
	// labels holds Labels' interned set (internPod), if any: Labels is
	// its map, shared with other pods.
	labels *labelSet
}

// NamedPort is a container port with a name.
type NamedPort struct {
	Name  string
	Proto policymodel.Protocol
	Port  uint16
}

// Key is "<namespace>/<name>".
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// selectable reports whether selectors take p: it has an address of its own
// and is not done.
func (p *Pod) selectable() bool {
	return p != nil && !p.HostNetwork && !p.Done && len(p.IPs) > 0
}

// Namespace is what the engine reads of a Namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
	// FlowLog is what its FlowLogAnnotation asks for; a value that does
	// not parse asks for nothing, and is kept in FlowLogBad (the watcher
	// warns of it).
	FlowLog    Verdicts
	FlowLogBad string
}

// PodFromAPI returns what the engine reads of p. Addresses that do not
// parse and ports without a name or with an unknown protocol are left out.
func PodFromAPI(p *corev1.Pod) *Pod {
	out := &Pod{
		Namespace:   p.Namespace,
		Name:        p.Name,
		Node:        p.Spec.NodeName,
		Labels:      p.Labels,
		HostNetwork: p.Spec.HostNetwork,
		Done:        p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
	}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	if len(out.IPs) == 0 && p.Status.PodIP != "" {
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	addPorts := func(cs []corev1.Container, sidecarsOnly bool) {
		for i := range cs {
			c := &cs[i]
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, cp := range c.Ports {
				proto, ok := protocolOf(cp.Protocol)
				if cp.Name == "" || !ok || cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
					continue
				}
				out.Ports = append(out.Ports, NamedPort{Name: cp.Name, Proto: proto, Port: uint16(cp.ContainerPort)})
			}
		}
	}
	addPorts(p.Spec.Containers, false)
	addPorts(p.Spec.InitContainers, true) // sidecars run beside the containers
	return out
}

// Node is what the engine reads of a Node: a ClusterNetworkPolicy's
// `nodes` peer selects nodes by their labels and takes the addresses of
// their status.addresses.
type Node struct {
	Name   string
	Labels map[string]string
	IPs    []netip.Addr
}

// NodeFromAPI returns what the engine reads of n: every address of
// status.addresses that is an IP (InternalIP, ExternalIP; a Hostname or
// DNS name is none), once, sorted.
func NodeFromAPI(n *corev1.Node) *Node {
	out := &Node{Name: n.Name, Labels: n.Labels}
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(out.IPs, ip.Unmap()) {
			out.IPs = append(out.IPs, ip.Unmap())
		}
	}
	slices.SortFunc(out.IPs, netip.Addr.Compare)
	return out
}

// NamespaceFromAPI returns what the engine reads of ns.
func NamespaceFromAPI(ns *corev1.Namespace) *Namespace {
	out := &Namespace{Name: ns.Name, Labels: ns.Labels}
	a := ns.Annotations[FlowLogAnnotation]
	if v, ok := ParseVerdicts(a); ok {
		out.FlowLog = v
	} else {
		out.FlowLogBad = a
	}
	return out
}

// protocolOf is the number of an API protocol ("" is TCP, the API's
// default).
func protocolOf(p corev1.Protocol) (policymodel.Protocol, bool) {
	if p == "" {
		return policymodel.TCP, true
	}
	return policymodel.ProtocolNamed(string(p))
}
