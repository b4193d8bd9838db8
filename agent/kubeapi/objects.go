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

// object is an API object with the part S of its spec the agent uses.
type object[S any] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              S `json:"spec,omitempty"`
}

// list is a list of objects T.
type list[T any] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []T `json:"items"`
}

// deepCopy copies o, its spec with copySpec.
func (o *object[S]) deepCopy(copySpec func(S) S) *object[S] {
	out := &object[S]{TypeMeta: o.TypeMeta, Spec: copySpec(o.Spec)}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// deepCopyList copies l, each item with its DeepCopyObject.
func deepCopyList[T any, PT interface {
	*T
	runtime.Object
}](l *list[T]) *list[T] {
	out := &list[T]{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]T, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *PT(&l.Items[i]).DeepCopyObject().(PT)
	}
	return out
}

// Node is the part of a core/v1 Node the kube lease backend uses.
type Node object[NodeSpec]

// NodeSpec is the part of a Node's spec the kube lease backend uses.
type NodeSpec struct {
	PodCIDR  string   `json:"podCIDR,omitempty"`
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

// NodeList is a list of Nodes.
type NodeList list[Node]

// Pod is the part of a core/v1 Pod the pod API uses.
type Pod object[PodSpec]

// PodSpec is the part of a Pod's spec the pod API uses.
type PodSpec struct {
	NodeName string `json:"nodeName,omitempty"`
}

// PodList is a list of Pods.
type PodList list[Pod]

// DeepCopyObject implements runtime.Object.
func (n *Node) DeepCopyObject() runtime.Object {
	if n == nil {
		return nil
	}
	return (*Node)((*object[NodeSpec])(n).deepCopy(func(s NodeSpec) NodeSpec {
		s.PodCIDRs = append([]string(nil), s.PodCIDRs...)
		return s
	}))
}

// DeepCopyObject implements runtime.Object.
func (p *Pod) DeepCopyObject() runtime.Object {
	if p == nil {
		return nil
	}
	return (*Pod)((*object[PodSpec])(p).deepCopy(func(s PodSpec) PodSpec { return s }))
}

// DeepCopyObject implements runtime.Object.
func (l *NodeList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	return (*NodeList)(deepCopyList((*list[Node])(l)))
}

// DeepCopyObject implements runtime.Object.
func (l *PodList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	return (*PodList)(deepCopyList((*list[Pod])(l)))
}
