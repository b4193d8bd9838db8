package kubelease

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The agent reads three things of a Node: its name, its annotations and its
// pod CIDRs. These types decode just that from the API's JSON, so the agent
// does not link k8s.io/api (whose generated code and scheme would double its
// resident memory). client-go's REST client and informer work with them like
// with the generated types.

// Node is the part of a core/v1 Node the agent uses.
type Node struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodeSpec `json:"spec,omitempty"`
}

// NodeSpec is the part of a Node's spec the agent uses.
type NodeSpec struct {
	PodCIDR  string   `json:"podCIDR,omitempty"`
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

// NodeList is a list of Nodes.
type NodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Node `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (n *Node) DeepCopyObject() runtime.Object {
	if n == nil {
		return nil
	}
	out := &Node{TypeMeta: n.TypeMeta}
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.PodCIDR = n.Spec.PodCIDR
	out.Spec.PodCIDRs = append([]string(nil), n.Spec.PodCIDRs...)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *NodeList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &NodeList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Node, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Node)
	}
	return out
}
