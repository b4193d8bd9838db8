package cluster

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// PodFromAPI returns what the agent reads of p. Addresses that do not
// parse, ports without a name or with an unknown protocol, and a
// network-status annotation that does not parse are left out.
func PodFromAPI(p *corev1.Pod) *Pod {
	out, _ := podFromAPI(p)
	return out
}

// podFromAPI is PodFromAPI, and the error of its network-status
// annotation.
func podFromAPI(p *corev1.Pod) (*Pod, error) {
	out := &Pod{
		Namespace:       p.Namespace,
		Name:            p.Name,
		Node:            p.Spec.NodeName,
		Labels:          p.Labels,
		HostNetwork:     p.Spec.HostNetwork,
		Done:            p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
		ResourceVersion: p.ResourceVersion,
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
				proto, ok := ProtocolOf(cp.Protocol)
				if cp.Name == "" || !ok || cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
					continue
				}
				out.Ports = append(out.Ports, NamedPort{Name: cp.Name, Proto: proto, Port: uint16(cp.ContainerPort)})
			}
		}
	}
	addPorts(p.Spec.Containers, false)
	addPorts(p.Spec.InitContainers, true) // sidecars run beside the containers
	var err error
	out.Attachments, err = ParseNetworkStatus(p.Annotations[agentapi.NetworkStatusAnnotation])
	return out, err
}

// ProtocolOf is the number of an API protocol ("" is TCP, the API's
// default).
func ProtocolOf(p corev1.Protocol) (policymodel.Protocol, bool) {
	if p == "" {
		return policymodel.TCP, true
	}
	return policymodel.ProtocolNamed(string(p))
}

// NamespaceFromAPI returns what the agent reads of ns.
func NamespaceFromAPI(ns *corev1.Namespace) *Namespace {
	return &Namespace{Name: ns.Name, UID: string(ns.UID), Labels: ns.Labels,
		FlowLog: ns.Annotations[FlowLogAnnotation], ResourceVersion: ns.ResourceVersion}
}

// NodeFromAPI returns what the agent reads of n: every address of
// status.addresses that is an IP (InternalIP, ExternalIP; a Hostname or
// DNS name is none), once, sorted.
func NodeFromAPI(n *corev1.Node) *Node {
	out := &Node{Name: n.Name, Labels: n.Labels, EgressNetworks: n.Annotations[EgressNetworksAnnotation], ResourceVersion: n.ResourceVersion}
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(out.IPs, ip.Unmap()) {
			out.IPs = append(out.IPs, ip.Unmap())
		}
	}
	slices.SortFunc(out.IPs, netip.Addr.Compare)
	out.HostIPs = hostIPs(n.Status.Addresses)
	out.Leaving = n.DeletionTimestamp != nil || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == ToBeDeletedTaint
	})
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, s := range cidrs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out.PodCIDRs = append(out.PodCIDRs, p.Masked())
		}
	}
	return out
}

// keep is what a cache keeps beyond what every cache keeps: the UID and
// annotations of the pods of node (Pod.Local), the node annotations
// named (Node.Annotations), and the LoadBalancer IPAM's part of each
// Service (Service.LoadBalancer).
type keep struct {
	node            string
	nodeAnnotations []string
	loadBalancer    func(*corev1.Service) any
}

// slim keeps of obj what the agent reads, once for every reader (the
// informers' transform), and what k asks for; bad is the error of a pod's
// network-status annotation. It passes what it does not know, and slim
// objects (its own output: the list is slimmed page by page), through.
func slim(obj any, k keep) (out any, bad error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p, err := podFromAPI(o)
		if k.node != "" && p.Node == k.node {
			p.Local = &LocalPod{UID: string(o.UID), Annotations: o.Annotations}
		}
		internPod(p)
		return p, err
	case *corev1.Namespace:
		return NamespaceFromAPI(o), nil
	case *corev1.Node:
		n := NodeFromAPI(o)
		for _, a := range k.nodeAnnotations {
			if v, ok := o.Annotations[a]; ok {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations[a] = v
			}
		}
		return n, nil
	case *corev1.Service:
		out := ServiceFromAPI(o)
		if k.loadBalancer != nil {
			out.LoadBalancer = k.loadBalancer(o)
		}
		return out, nil
	case *discoveryv1.EndpointSlice:
		return EndpointSliceFromAPI(o), nil
	case *networkingv1.ServiceCIDR:
		return ServiceCIDRFromAPI(o), nil
	}
	return obj, nil
}

// ToBeDeletedTaint is the cluster autoscaler's taint on a node it is about
// to delete.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// hostIPs are the node IPs of addrs: the first InternalIP of each family,
// else the first ExternalIP of it (as the kubelet and kube-proxy choose
// them), the first family first.
func hostIPs(addrs []corev1.NodeAddress) []netip.Addr {
	var out []netip.Addr
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range addrs {
			ip, err := netip.ParseAddr(a.Address)
			if a.Type != typ || err != nil || slices.ContainsFunc(out, sameFamily(ip)) {
				continue
			}
			out = append(out, ip.Unmap())
		}
	}
	return out
}
