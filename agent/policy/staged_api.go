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

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// StagedGroupVersion is the staged policies' API: cnibox.io/v1alpha1
// (deploy/kubernetes/staged-policies-crds.yaml).
func StagedGroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: "cnibox.io", Version: "v1alpha1"}
}

// The staged policies' kinds: StagedNetworkPolicy is a NetworkPolicy and
// StagedClusterNetworkPolicy a ClusterNetworkPolicy that are evaluated and
// logged, never enforced; each List a list of them.
type (
	StagedNetworkPolicy            kubeapi.Object[networkingv1.NetworkPolicySpec]
	StagedNetworkPolicyList        kubeapi.List[StagedNetworkPolicy]
	StagedClusterNetworkPolicy     kubeapi.Object[cnpv1.ClusterNetworkPolicySpec]
	StagedClusterNetworkPolicyList kubeapi.List[StagedClusterNetworkPolicy]
)

// DeepCopyObject implements runtime.Object.
func (p *StagedNetworkPolicy) DeepCopyObject() runtime.Object {
	return (*StagedNetworkPolicy)((*kubeapi.Object[networkingv1.NetworkPolicySpec])(p).DeepCopy(kubeapi.CopySpec[networkingv1.NetworkPolicySpec]))
}

// DeepCopyObject implements runtime.Object.
func (l *StagedNetworkPolicyList) DeepCopyObject() runtime.Object {
	return (*StagedNetworkPolicyList)(kubeapi.DeepCopyList((*kubeapi.List[StagedNetworkPolicy])(l)))
}

// DeepCopyObject implements runtime.Object.
func (p *StagedClusterNetworkPolicy) DeepCopyObject() runtime.Object {
	return (*StagedClusterNetworkPolicy)((*kubeapi.Object[cnpv1.ClusterNetworkPolicySpec])(p).DeepCopy(kubeapi.CopySpec[cnpv1.ClusterNetworkPolicySpec]))
}

// DeepCopyObject implements runtime.Object.
func (l *StagedClusterNetworkPolicyList) DeepCopyObject() runtime.Object {
	return (*StagedClusterNetworkPolicyList)(kubeapi.DeepCopyList((*kubeapi.List[StagedClusterNetworkPolicy])(l)))
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
