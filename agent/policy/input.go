package policy

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// Pod is what the engine reads of a Pod: the agent's one pod type, which
// its informer cache holds (agent/cluster), a few hundred bytes where the
// API object is kilobytes, since the agent holds every pod of the cluster
// (any of them can be a peer). The engine keeps the cache's pods, never
// changing one.
type Pod = cluster.Pod

// NamedPort is a container port with a name.
type NamedPort = cluster.NamedPort

// Namespace is what the engine reads of a Namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
	// FlowLog is what its FlowLogAnnotation asks for; a value that does
	// not parse asks for nothing, and is kept in FlowLogBad (the watcher
	// warns of it).
	FlowLog    FlowLogSetting
	FlowLogBad string
}

// PodFromAPI returns what the engine reads of p (cluster.PodFromAPI).
func PodFromAPI(p *corev1.Pod) *Pod { return cluster.PodFromAPI(p) }

// Node is what the engine reads of a Node: a ClusterNetworkPolicy's
// `nodes` peer selects nodes by their labels and takes the addresses of
// their status.addresses.
type Node struct {
	Name   string
	Labels map[string]string
	IPs    []netip.Addr
}

// NodeFromAPI returns what the engine reads of n (its cache form's, NodeOf).
func NodeFromAPI(n *corev1.Node) *Node { return NodeOf(cluster.NodeFromAPI(n)) }

// NodeOf returns what the engine reads of the cache's n.
func NodeOf(n *cluster.Node) *Node { return &Node{Name: n.Name, Labels: n.Labels, IPs: n.IPs} }

// NamespaceFromAPI returns what the engine reads of ns (its cache form's,
// NamespaceOf).
func NamespaceFromAPI(ns *corev1.Namespace) *Namespace {
	return NamespaceOf(cluster.NamespaceFromAPI(ns))
}

// NamespaceOf returns what the engine reads of the cache's ns.
func NamespaceOf(ns *cluster.Namespace) *Namespace {
	out := &Namespace{Name: ns.Name, Labels: ns.Labels}
	if v, ok := ParseFlowLogSetting(ns.FlowLog); ok {
		out.FlowLog = v
	} else {
		out.FlowLogBad = ns.FlowLog
	}
	return out
}

// protocolOf is the number of an API protocol ("" is TCP, the API's
// default).
func protocolOf(p corev1.Protocol) (policymodel.Protocol, bool) { return cluster.ProtocolOf(p) }
