//go:build !nokube

package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// StagedGroupVersion is the staged policies' API: cnibox.io/v1alpha1
// (deploy/kubernetes/staged-policies-crds.yaml).
func StagedGroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: "cnibox.io", Version: "v1alpha1"}
}

// StagedNetworkPolicy is a NetworkPolicy that is evaluated and logged,
// never enforced.
type StagedNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              networkingv1.NetworkPolicySpec `json:"spec"`
}

// StagedNetworkPolicyList is a list of them.
type StagedNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StagedNetworkPolicy `json:"items"`
}

// StagedClusterNetworkPolicy is a ClusterNetworkPolicy that is evaluated
// and logged, never enforced.
type StagedClusterNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cnpv1.ClusterNetworkPolicySpec `json:"spec"`
}

// StagedClusterNetworkPolicyList is a list of them.
type StagedClusterNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StagedClusterNetworkPolicy `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (p *StagedNetworkPolicy) DeepCopyObject() runtime.Object {
	return &StagedNetworkPolicy{TypeMeta: p.TypeMeta, ObjectMeta: *p.ObjectMeta.DeepCopy(), Spec: *p.Spec.DeepCopy()}
}

// DeepCopyObject implements runtime.Object.
func (l *StagedNetworkPolicyList) DeepCopyObject() runtime.Object {
	return &StagedNetworkPolicyList{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy(), Items: CopyItems(l.Items)}
}

// DeepCopyObject implements runtime.Object.
func (p *StagedClusterNetworkPolicy) DeepCopyObject() runtime.Object {
	return &StagedClusterNetworkPolicy{TypeMeta: p.TypeMeta, ObjectMeta: *p.ObjectMeta.DeepCopy(), Spec: *p.Spec.DeepCopy()}
}

// DeepCopyObject implements runtime.Object.
func (l *StagedClusterNetworkPolicyList) DeepCopyObject() runtime.Object {
	return &StagedClusterNetworkPolicyList{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy(), Items: CopyItems(l.Items)}
}

// CopyItems deep-copies a list's items, each by its own DeepCopyObject
// (nil for none).
func CopyItems[T any, P interface {
	*T
	DeepCopyObject() runtime.Object
}](items []T) []T {
	var out []T
	for i := range items {
		out = append(out, *P(&items[i]).DeepCopyObject().(P))
	}
	return out
}

// servedStaged lists which of the staged policies' resources the API
// serves ("stagednetworkpolicies", "stagedclusternetworkpolicies"): none
// without their CRDs.
func servedStaged(ctx context.Context, c rest.Interface) []string {
	// Not served, or no answer: the watch goes on without.
	names, _ := Served(ctx, c, StagedGroupVersion(), "stagednetworkpolicies", "stagedclusternetworkpolicies")
	return names
}

// Served lists which of the resources names the API serves in the group
// version gv (discovery): none when it serves no such version (404), and
// an error when it does not answer. agent/mnp asks it for its CRD too.
func Served(ctx context.Context, c rest.Interface, gv schema.GroupVersion, names ...string) ([]string, error) {
	// JSON: the client may ask for protobuf, which discovery also serves.
	raw, err := c.Get().AbsPath("/apis", gv.Group, gv.Version).SetHeader("Accept", "application/json").DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovery of %s: %w", gv, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("discovery of %s: %w", gv, err)
	}
	var out []string
	for _, r := range list.APIResources {
		if slices.Contains(names, r.Name) {
			out = append(out, r.Name)
		}
	}
	return out, nil
}
