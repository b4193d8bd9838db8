package cluster

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Service is what the Services proxy (agent/services) reads of a Service:
// its addresses, ports and policies, already read as kube-proxy reads them
// (ServiceFromAPI); not its selector, status conditions or annotations,
// nor spec.trafficDistribution: the EndpointSlice controller writes it
// into the slices' hints, which is where kube-proxy reads it. The
// NetworkPolicy watcher reads the cluster DNS Service's ClusterIPs (its
// trusted resolvers), the LoadBalancer IPAM its part (LoadBalancer).
type Service struct {
	Namespace, Name string
	// Skip: the proxy leaves the Service alone: headless (clusterIP None),
	// no cluster IP, or type ExternalName (kube-proxy's ShouldSkipService),
	// or labelled for another proxy (otherProxy).
	Skip bool
	// ClusterIPs are spec.clusterIPs (else spec.clusterIP), at most one a
	// family, those that parse; a Service another proxy serves (Skip by
	// its labels) has them too: the DNS resolvers the NetworkPolicy
	// watcher trusts are its cluster IPs whoever proxies it.
	ClusterIPs  []netip.Addr
	Ports       []ServicePort
	ExternalIPs []netip.Addr
	// LoadBalancerIPs are status.loadBalancer.ingress[].ip of the ingresses
	// in VIP mode (ipMode unset or VIP; Proxy mode is the load balancer's
	// own, as kube-proxy leaves it).
	LoadBalancerIPs []netip.Addr
	// SourceRanges are spec.loadBalancerSourceRanges (trimmed, masked).
	SourceRanges []netip.Prefix
	// ExternalLocal: externalTrafficPolicy Local on a Service reachable
	// from outside (NodePort, LoadBalancer, or externalIPs);
	// InternalLocal: internalTrafficPolicy Local.
	ExternalLocal, InternalLocal bool
	// AffinitySeconds is sessionAffinity ClientIP's timeout; 0: no
	// affinity.
	AffinitySeconds int32
	// HealthCheckNodePort: of a LoadBalancer Service with ExternalLocal.
	HealthCheckNodePort uint16
	// LoadBalancer is what the LoadBalancer IPAM (agent/lbipam) keeps of
	// the Service, made by Config.LoadBalancer at the informer's
	// transform; nil without it, or for a Service the IPAM has no part in.
	LoadBalancer    any
	ResourceVersion string
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name     string
	Protocol corev1.Protocol // "" read as TCP
	Port     uint16
	NodePort uint16
}

// Key is "<namespace>/<name>".
func (s *Service) Key() string { return s.Namespace + "/" + s.Name }

// GetObjectKind implements runtime.Object.
func (s *Service) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object (sharing the slices: nothing
// changes a Service the cache holds).
func (s *Service) DeepCopyObject() runtime.Object {
	out := *s
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor.
func (s *Service) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, ResourceVersion: s.ResourceVersion}
}

// EndpointSlice is what the Services proxy reads of an EndpointSlice
// (discovery.k8s.io/v1).
type EndpointSlice struct {
	Namespace, Name string
	// Service is its kubernetes.io/service-name label ("" : no Service's;
	// the proxy ignores it).
	Service string
	// AddressType is IPv4, IPv6 or FQDN (the proxy reads the first two).
	AddressType discoveryv1.AddressType
	Ports       []EndpointPort
	Endpoints   []SliceEndpoint
	// TriggerTime is its endpoints.kubernetes.io/last-change-trigger-time
	// (zero: none): when the change it carries began, the start of
	// kube-proxy's network programming latency.
	TriggerTime     time.Time
	ResourceVersion string
}

// EndpointPort is one port of a slice; those without a port number are
// left out (kube-proxy ignores them).
type EndpointPort struct {
	Name     string
	Protocol corev1.Protocol
	Port     uint16
}

// SliceEndpoint is one endpoint of a slice: its first address (the one
// kube-proxy uses) and its conditions read with the API's defaults (ready
// and serving unset are true, terminating unset is false).
type SliceEndpoint struct {
	Addr                        netip.Addr
	Ready, Serving, Terminating bool
	Node, Zone                  string
	// ZoneHints and NodeHints are hints.forZones and hints.forNodes.
	ZoneHints, NodeHints []string
}

// Key is "<namespace>/<name>".
func (e *EndpointSlice) Key() string { return e.Namespace + "/" + e.Name }

// GetObjectKind implements runtime.Object.
func (e *EndpointSlice) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object (sharing, as Service).
func (e *EndpointSlice) DeepCopyObject() runtime.Object {
	out := *e
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor.
func (e *EndpointSlice) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace, ResourceVersion: e.ResourceVersion}
}

// The labels by which a Service is another proxy's (kube-proxy's
// informers select "!service.kubernetes.io/service-proxy-name,
// !service.kubernetes.io/headless": a Service handed to another
// implementation, or marked headless for proxies, is left alone).
const (
	labelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	labelHeadless         = "service.kubernetes.io/headless"
)

// otherProxy reports whether labels hand the Service to another proxy.
func otherProxy(labels map[string]string) bool {
	_, named := labels[labelServiceProxyName]
	_, headless := labels[labelHeadless]
	return named || headless
}

// ServiceFromAPI returns what the proxy reads of s. Addresses and ranges
// that do not parse are left out.
func ServiceFromAPI(s *corev1.Service) *Service {
	out := &Service{Namespace: s.Namespace, Name: s.Name, ResourceVersion: s.ResourceVersion}
	sp := &s.Spec
	if sp.ClusterIP == "" || sp.ClusterIP == corev1.ClusterIPNone || sp.Type == corev1.ServiceTypeExternalName {
		out.Skip = true
		return out
	}
	ips := sp.ClusterIPs
	if len(ips) == 0 {
		ips = []string{sp.ClusterIP}
	}
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil && !slices.ContainsFunc(out.ClusterIPs, sameFamily(a)) {
			out.ClusterIPs = append(out.ClusterIPs, a.Unmap())
		}
	}
	if otherProxy(s.Labels) {
		out.Skip = true
		return out
	}
	for _, p := range sp.Ports {
		if p.Port < 1 || p.Port > 65535 {
			continue
		}
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out.Ports = append(out.Ports, ServicePort{Name: p.Name, Protocol: proto, Port: uint16(p.Port), NodePort: uint16(max(0, min(p.NodePort, 65535)))})
	}
	for _, s := range sp.ExternalIPs {
		if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			out.ExternalIPs = append(out.ExternalIPs, a.Unmap())
		}
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IP == "" || (in.IPMode != nil && *in.IPMode != corev1.LoadBalancerIPModeVIP) {
			continue
		}
		if a, err := netip.ParseAddr(in.IP); err == nil {
			out.LoadBalancerIPs = append(out.LoadBalancerIPs, a.Unmap())
		}
	}
	for _, r := range sp.LoadBalancerSourceRanges {
		if p, err := netip.ParsePrefix(strings.TrimSpace(r)); err == nil {
			out.SourceRanges = append(out.SourceRanges, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p)).Masked())
		}
	}
	external := sp.Type == corev1.ServiceTypeLoadBalancer || sp.Type == corev1.ServiceTypeNodePort ||
		(sp.Type == corev1.ServiceTypeClusterIP && len(sp.ExternalIPs) > 0)
	out.ExternalLocal = external && sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	out.InternalLocal = sp.InternalTrafficPolicy != nil && *sp.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.AffinitySeconds = corev1.DefaultClientIPServiceAffinitySeconds
		if c := sp.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			out.AffinitySeconds = *c.ClientIP.TimeoutSeconds
		}
	}
	if sp.Type == corev1.ServiceTypeLoadBalancer && out.ExternalLocal && sp.HealthCheckNodePort > 0 && sp.HealthCheckNodePort <= 65535 {
		out.HealthCheckNodePort = uint16(sp.HealthCheckNodePort)
	}
	return out
}

// sameFamily is a predicate: b is of a's family.
func sameFamily(a netip.Addr) func(netip.Addr) bool {
	return func(b netip.Addr) bool { return a.Unmap().Is4() == b.Is4() }
}

// unmapBits is what an IPv4-mapped prefix loses when unmapped.
func unmapBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return 96
	}
	return 0
}

// EndpointSliceFromAPI returns what the proxy reads of e.
func EndpointSliceFromAPI(e *discoveryv1.EndpointSlice) *EndpointSlice {
	out := &EndpointSlice{Namespace: e.Namespace, Name: e.Name, Service: e.Labels[discoveryv1.LabelServiceName],
		AddressType: e.AddressType, ResourceVersion: e.ResourceVersion}
	if t, err := time.Parse(time.RFC3339, e.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil {
		out.TriggerTime = t
	}
	for _, p := range e.Ports {
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			continue
		}
		ep := EndpointPort{Protocol: corev1.ProtocolTCP, Port: uint16(*p.Port)}
		if p.Name != nil {
			ep.Name = *p.Name
		}
		if p.Protocol != nil {
			ep.Protocol = *p.Protocol
		}
		out.Ports = append(out.Ports, ep)
	}
	for _, ep := range e.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		a, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil {
			continue
		}
		c := ep.Conditions
		se := SliceEndpoint{Addr: a.Unmap(),
			Ready:       c.Ready == nil || *c.Ready,
			Serving:     c.Serving == nil || *c.Serving,
			Terminating: c.Terminating != nil && *c.Terminating,
		}
		if ep.NodeName != nil {
			se.Node = *ep.NodeName
		}
		if ep.Zone != nil {
			se.Zone = *ep.Zone
		}
		if h := ep.Hints; h != nil {
			for _, z := range h.ForZones {
				se.ZoneHints = append(se.ZoneHints, z.Name)
			}
			for _, n := range h.ForNodes {
				se.NodeHints = append(se.NodeHints, n.Name)
			}
		}
		out.Endpoints = append(out.Endpoints, se)
	}
	return out
}
