// Package svcmodel is the Services proxy's vocabulary: what one node
// serves, resolved from the cluster's Services and EndpointSlices by the
// agent's watcher (agent/services) and written by the renderer (the
// services table of netops/nft, on the nftables core). It is to the
// proxy what policymodel is to the policy table: the watcher decides
// (which endpoints a frontend may use, kube-proxy's CategorizeEndpoints),
// the renderer only writes what it is given, and the two meet here.
//
// A Snapshot is immutable once handed over: the renderer and its tests
// may keep it and compare it with the next one.
package svcmodel

import (
	"fmt"
	"net/netip"
	"time"
)

// Proto is a Service port's protocol, as Kubernetes spells it.
type Proto string

// The protocols a Service port may have.
const (
	TCP  Proto = "TCP"
	UDP  Proto = "UDP"
	SCTP Proto = "SCTP"
)

// PortName names one port of one Service, kube-proxy's ServicePortName:
// "namespace/name:port" (port is the port's name, "" when the Service has
// one unnamed port).
type PortName struct {
	Namespace, Name, Port string
}

func (n PortName) String() string {
	return fmt.Sprintf("%s/%s:%s", n.Namespace, n.Name, n.Port)
}

// Kind is how a frontend is reached.
type Kind uint8

// The frontend kinds. NodePort frontends have no address of their own:
// they are served on the node's NodePort addresses (Snapshot.NodePortAddrs).
const (
	ClusterIP Kind = iota + 1
	NodePort
	ExternalIP
	LoadBalancer
)

func (k Kind) String() string {
	switch k {
	case ClusterIP:
		return "ClusterIP"
	case NodePort:
		return "NodePort"
	case ExternalIP:
		return "ExternalIP"
	case LoadBalancer:
		return "LoadBalancer"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// External reports whether traffic to the kind is external traffic in
// Kubernetes' sense (externalTrafficPolicy applies to it).
func (k Kind) External() bool { return k != ClusterIP }

// Frontend is one address and port a Service port is reached at.
type Frontend struct {
	Kind Kind
	// Addr is the frontend's address; the zero Addr for NodePort, whose
	// Family says which of the node's addresses serve it.
	Addr   netip.Addr
	Family Family
	Port   uint16
}

// Family is an IP family.
type Family uint8

// The families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// FamilyOf is a's family.
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// Endpoint is one backend of a Service port, as its EndpointSlice says.
type Endpoint struct {
	Addr netip.Addr
	Port uint16
	// The conditions of discovery.k8s.io/v1 (Ready defaults to true when
	// the slice leaves it unset, as kube-proxy reads it).
	Ready, Serving, Terminating bool
	// NodeName is the endpoint's node; Local that it is this node.
	NodeName string
	Local    bool
	// Zone is the endpoint's zone, for the topology choices.
	Zone string
}

func (e Endpoint) String() string { return netip.AddrPortFrom(e.Addr, e.Port).String() }

// ServicePort is one port of one Service in one family, with what the
// watcher chose for each kind of traffic.
type ServicePort struct {
	Name     PortName
	Family   Family
	Protocol Proto
	// Frontends are where the port is reached (each of Family).
	Frontends []Frontend
	// ClusterEndpoints serve internal traffic (to the ClusterIP) and,
	// unless ExternalLocal, external traffic; LocalEndpoints serve
	// external traffic when ExternalLocal and internal traffic when
	// InternalLocal. Both are already chosen: ready ones, else serving and
	// terminating ones where kube-proxy falls back to them, filtered by
	// topology (trafficDistribution, hints) and by node for Local.
	ClusterEndpoints []Endpoint
	LocalEndpoints   []Endpoint
	// ExternalLocal: externalTrafficPolicy Local (the client's address is
	// kept; a node without a local endpoint drops external traffic).
	// InternalLocal: internalTrafficPolicy Local.
	ExternalLocal, InternalLocal bool
	// HasEndpoints: some endpoint in the cluster is usable (ready, or
	// serving and terminating: kube-proxy's hasAnyEndpoints; one neither
	// ready nor serving does not count). A frontend whose chosen set is
	// empty is rejected (ICMP port unreachable, TCP RST) when
	// !HasEndpoints and dropped otherwise, as kube-proxy does.
	HasEndpoints bool
	// AffinityTimeout is sessionAffinity ClientIP's timeout; 0: none.
	AffinityTimeout time.Duration
	// SourceRanges are loadBalancerSourceRanges: when non-empty, traffic
	// to the LoadBalancer frontends from other sources is dropped.
	SourceRanges []netip.Prefix
	// HealthCheckNodePort is the port the agent answers kube-proxy's
	// health check on for ExternalLocal LoadBalancer Services; 0: none.
	HealthCheckNodePort uint16
}

// Snapshot is everything the node serves.
type Snapshot struct {
	// Ports, then Parts, are the ServicePorts, sorted by Name then
	// Family: read them with Len, All and Service (snapshot.go says why
	// there are two).
	Ports []ServicePort
	Parts [][]ServicePort
	// NodePortAddrs are the node's addresses that serve NodePorts
	// (--nodeport-addresses resolved against the node's interfaces).
	NodePortAddrs []netip.Addr
	// ClusterCIDRs are the pods' networks: traffic from elsewhere to a
	// ClusterIP is masqueraded (kube-proxy's detect-local).
	ClusterCIDRs []netip.Prefix
	// ServiceCIDRs are the cluster's Service ranges (the spec.cidrs of
	// its networking.k8s.io/v1 ServiceCIDR objects, both families): a
	// new connection to an address of them that is no ClusterIP is
	// dropped, as kube-proxy's cluster-ips-check does (a connection to a
	// ClusterIP on a port none of its Services has is rejected whatever
	// this holds).
	ServiceCIDRs []netip.Prefix
	// Seq numbers the snapshots of one watcher from 1 (0: not numbered).
	// When Partial, Changed names the Services whose ports may differ
	// from those of the snapshot numbered Seq-1 (the others' are equal),
	// so that a renderer that applied that one last compares only those
	// (a change of one Service in 30,000 costs that Service, not a walk
	// of all). Anything else (Seq 0, not Partial, another snapshot
	// applied last) is compared whole.
	Seq     uint64
	Partial bool
	Changed []ServiceName
}

// ServiceName names a Service: namespace and name.
type ServiceName struct {
	Namespace, Name string
}
