//go:build !nokube

package mnp

import (
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cnibox/cnibox/agent/kubeapi"
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
// it as it reads a NetworkPolicy. MultiNetworkPolicyList is a list of them.
type (
	MultiNetworkPolicy     kubeapi.Object[networkingv1.NetworkPolicySpec]
	MultiNetworkPolicyList kubeapi.List[MultiNetworkPolicy]
)

// DeepCopyObject implements runtime.Object.
func (p *MultiNetworkPolicy) DeepCopyObject() runtime.Object {
	return (*MultiNetworkPolicy)((*kubeapi.Object[networkingv1.NetworkPolicySpec])(p).DeepCopy(kubeapi.CopySpec[networkingv1.NetworkPolicySpec]))
}

// DeepCopyObject implements runtime.Object.
func (l *MultiNetworkPolicyList) DeepCopyObject() runtime.Object {
	return (*MultiNetworkPolicyList)(kubeapi.DeepCopyList((*kubeapi.List[MultiNetworkPolicy])(l)))
}
