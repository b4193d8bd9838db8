package kubeapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The agent reads few fields of an object: of a Node its name, annotations
// and pod CIDRs, of a Pod its metadata and node name. These types decode
// just that from the API's JSON, so the agent does not link k8s.io/api
// (whose generated code and scheme would double its resident memory).
// client-go's REST client and informers work with them like with the
// generated types; their names are the kinds the scheme knows them by.

// Object is an API object with the part S of its spec the agent uses (of a
// custom resource whose spec is an upstream type, the whole: the staged
// policies, MultiNetworkPolicy). A kind is a type defined as one (`type Pod
// Object[PodSpec]`), so that it keeps its own name, which a scheme takes
// for the kind, and its DeepCopyObject is one call of DeepCopy.
type Object[S any] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              S `json:"spec,omitempty"`
}

// List is a list of objects T (a type defined as an Object).
type List[T any] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []T `json:"items"`
}

// DeepCopy copies o, its spec with copySpec.
func (o *Object[S]) DeepCopy(copySpec func(S) S) *Object[S] {
	out := &Object[S]{TypeMeta: o.TypeMeta, Spec: copySpec(o.Spec)}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// CopySpec deep-copies a spec of a type generated with DeepCopy (k8s.io/api's,
// the network policy API's): DeepCopy's copySpec for such an Object.
func CopySpec[S any, PS interface {
	*S
	DeepCopy() *S
}](s S) S {
	return *PS(&s).DeepCopy()
}

// DeepCopyList copies l, each item with its DeepCopyObject.
func DeepCopyList[T any, PT interface {
	*T
	runtime.Object
}](l *List[T]) *List[T] {
	out := &List[T]{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]T, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *PT(&l.Items[i]).DeepCopyObject().(PT)
	}
	return out
}

// Node is the part of a core/v1 Node the kube lease backend uses.
type Node Object[NodeSpec]

// NodeSpec is the part of a Node's spec the kube lease backend uses.
type NodeSpec struct {
	PodCIDR  string   `json:"podCIDR,omitempty"`
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

// NodeList is a list of Nodes.
type NodeList List[Node]

// Pod is the part of a core/v1 Pod the pod API uses.
type Pod Object[PodSpec]

// PodSpec is the part of a Pod's spec the pod API uses.
type PodSpec struct {
	NodeName string `json:"nodeName,omitempty"`
}

// PodList is a list of Pods.
type PodList List[Pod]

// DeepCopyObject implements runtime.Object.
func (n *Node) DeepCopyObject() runtime.Object {
	if n == nil {
		return nil
	}
	return (*Node)((*Object[NodeSpec])(n).DeepCopy(func(s NodeSpec) NodeSpec {
		s.PodCIDRs = append([]string(nil), s.PodCIDRs...)
		return s
	}))
}

// DeepCopyObject implements runtime.Object.
func (p *Pod) DeepCopyObject() runtime.Object {
	if p == nil {
		return nil
	}
	return (*Pod)((*Object[PodSpec])(p).DeepCopy(func(s PodSpec) PodSpec { return s }))
}

// DeepCopyObject implements runtime.Object.
func (l *NodeList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	return (*NodeList)(DeepCopyList((*List[Node])(l)))
}

// DeepCopyObject implements runtime.Object.
func (l *PodList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	return (*PodList)(DeepCopyList((*List[Pod])(l)))
}
