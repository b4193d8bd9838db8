package podapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The pod API reads a pod's metadata and node name only. These types decode
// just that from the API's JSON, as the kube lease backend does for Nodes,
// so the agent does not link k8s.io/api's generated code and scheme.

// Pod is the part of a core/v1 Pod the pod API uses.
type Pod struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PodSpec `json:"spec,omitempty"`
}

// PodSpec is the part of a Pod's spec the pod API uses.
type PodSpec struct {
	NodeName string `json:"nodeName,omitempty"`
}

// PodList is a list of Pods.
type PodList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pod `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (p *Pod) DeepCopyObject() runtime.Object {
	if p == nil {
		return nil
	}
	out := &Pod{TypeMeta: p.TypeMeta, Spec: p.Spec}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *PodList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &PodList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Pod, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Pod)
	}
	return out
}
