package cluster

import (
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The informers store these types, not the API's: every pod of the cluster
// is held (any can be a NetworkPolicy peer, an egress gateway's, a
// MultiNetworkPolicy's), and a whole Pod is kilobytes (spec, status,
// managed fields). Each is a runtime.Object whose metadata (what the
// informer's key and the reflector read) is made when asked for
// (GetObjectMeta) rather than held: an ObjectMeta is ~250 bytes of fields
// that are empty but three, for every pod of the cluster. Nothing may
// change an object the cache handed out: every reader shares it.

// The annotations the cache keeps (of the others, nothing is kept).
const (
	// FlowLogAnnotation, on a namespace, asks for its pods' verdicts in
	// the flow log (agent/policy, docs/flowlog.md).
	FlowLogAnnotation = "cnibox.io/flow-log"
	// EgressNetworksAnnotation, on a node, holds the networks of its
	// uplink that its agent publishes (agent/egress).
	EgressNetworksAnnotation = "cnibox.io/egress-networks"
)

// Pod is what the agent reads of a Pod.
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
	// Attachments are its secondary interfaces (its network-status
	// annotation, ParseNetworkStatus): MultiNetworkPolicy's peers.
	Attachments []Attachment
	// Local is what the pod API reads of a pod of this node (the cache's
	// Config.NodeName); nil for the other nodes' pods, so that the cache
	// of a large cluster holds the UIDs and annotations of a node's
	// pods, not of the cluster's.
	Local           *LocalPod
	ResourceVersion string
	// labels holds Labels' interned set (internPod), if any: Labels is
	// its map, shared with other pods.
	labels *labelSet
}

// LocalPod is what the cache keeps of a pod of this node beside the
// rest: its UID and every annotation (the multi role reads its networks,
// its cni-args, its network-status through the pod API, agent/podapi).
type LocalPod struct {
	UID         string
	Annotations map[string]string
}

// NamedPort is a container port with a name.
type NamedPort struct {
	Name  string
	Proto policymodel.Protocol
	Port  uint16
}

// Attachment is one secondary interface of a pod, as its network-status
// annotation states it.
type Attachment struct {
	Network string // "<namespace>/<name>" of its NetworkAttachmentDefinition
	Iface   string // its name in the pod ("net1")
	IPs     []netip.Addr
}

// Key is "<namespace>/<name>".
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// Selectable reports whether label selectors take p: it has an address of
// its own and is not done.
func (p *Pod) Selectable() bool {
	return p != nil && !p.HostNetwork && !p.Done && len(p.IPs) > 0
}

// GetObjectKind implements runtime.Object: a slim object has no kind.
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. Nothing changes a Pod the
// cache holds, so the copy shares the labels, addresses and ports.
func (p *Pod) DeepCopyObject() runtime.Object {
	out := *p
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor (meta.Accessor): the
// name, namespace and resource version.
func (p *Pod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion}
}

// Namespace is what the agent reads of a Namespace.
type Namespace struct {
	Name            string
	UID             string // (the Events about it name it)
	Labels          map[string]string
	FlowLog         string // its FlowLogAnnotation ("" none)
	ResourceVersion string
}

// GetObjectKind implements runtime.Object.
func (n *Namespace) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object (sharing the labels, as Pod).
func (n *Namespace) DeepCopyObject() runtime.Object {
	out := *n
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor.
func (n *Namespace) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.Name, UID: types.UID(n.UID), ResourceVersion: n.ResourceVersion}
}

// Node is what the agent reads of a Node: its labels, the addresses of its
// status.addresses (a ClusterNetworkPolicy's `nodes` peer), its pod ranges
// (those and the overlay's annotations make its lease,
// agent/lease/kubelease), its EgressNetworksAnnotation (egress gateways);
// not its status, images and conditions.
type Node struct {
	Name   string
	Labels map[string]string
	IPs    []netip.Addr // every IP of status.addresses, once, sorted
	// HostIPs are its primary addresses, the kubelet's node IPs: the first
	// InternalIP of each family, else its first ExternalIP (kube-proxy's
	// --nodeport-addresses primary), the API's order.
	HostIPs []netip.Addr
	// Leaving: the node is being deleted, or the cluster autoscaler
	// tainted it ToBeDeletedByClusterAutoscaler (kube-proxy's /healthz
	// then answers 503, so load balancers drain it).
	Leaving        bool
	PodCIDRs       []netip.Prefix // spec.podCIDRs (else spec.podCIDR), those that parse
	EgressNetworks string         // its EgressNetworksAnnotation ("" none)
	// Annotations are those of Config.NodeAnnotations it has (nil: none):
	// the overlay's flannel annotations.
	Annotations     map[string]string
	ResourceVersion string
}

// GetObjectKind implements runtime.Object.
func (n *Node) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object (sharing the labels, as Pod).
func (n *Node) DeepCopyObject() runtime.Object {
	out := *n
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor.
func (n *Node) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}
}
