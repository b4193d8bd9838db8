//go:build !nokube

package mnp

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cnibox/cnibox/agent/policy"
)

// GroupVersion is MultiNetworkPolicy's API: k8s.cni.cncf.io/v1beta1, the
// version the upstream CRD serves and stores
// (deploy/kubernetes/multi-networkpolicy-crd.yaml).
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: "k8s.cni.cncf.io", Version: "v1beta1"}
}

// MultiNetworkPolicy is the upstream kind read into NetworkPolicy's spec:
// upstream's spec types (k8snetworkplumbingwg/multi-networkpolicy) are a
// copy of NetworkPolicy's with the same JSON, so the policy engine reads
// it as it reads a NetworkPolicy.
type MultiNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              networkingv1.NetworkPolicySpec `json:"spec"`
}

// MultiNetworkPolicyList is a list of them.
type MultiNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MultiNetworkPolicy `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (p *MultiNetworkPolicy) DeepCopyObject() runtime.Object {
	return &MultiNetworkPolicy{TypeMeta: p.TypeMeta, ObjectMeta: *p.ObjectMeta.DeepCopy(), Spec: *p.Spec.DeepCopy()}
}

// DeepCopyObject implements runtime.Object.
func (l *MultiNetworkPolicyList) DeepCopyObject() runtime.Object {
	return &MultiNetworkPolicyList{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy(), Items: policy.CopyItems(l.Items)}
}
