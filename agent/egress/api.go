//go:build !nokube

package egress

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// GroupVersion is EgressGateway's API.
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: "cnibox.io", Version: "v1alpha1"}
}

// Resource is EgressGateway's plural, as the API paths name it.
const Resource = "egressgateways"

// EgressGateway is the kind: cluster-scoped, an egress address being a
// resource of the cluster's network.
type EgressGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GatewaySpec   `json:"spec"`
	Status            GatewayStatus `json:"status,omitempty"`
}

// GatewaySpec is what an EgressGateway asks for.
type GatewaySpec struct {
	// PodSelector and NamespaceSelector select the pods, as a
	// NetworkPolicy peer does: both must match; an absent one matches all.
	PodSelector       *metav1.LabelSelector `json:"podSelector,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// EgressIPs are the addresses the selected pods leave from, each on
	// the network of the nodes that may hold it.
	EgressIPs []string `json:"egressIPs"`
	// NodeSelector selects the nodes that may hold the addresses (absent:
	// every node).
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// DestinationCIDRs limits the gateway to traffic to these networks
	// (absent: everything outside the cluster).
	DestinationCIDRs []string `json:"destinationCIDRs,omitempty"`
}

// GatewayStatus is what the agents report.
type GatewayStatus struct {
	// EgressIPs names the node holding each address that one holds.
	EgressIPs  []HeldIP           `json:"egressIPs,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// HeldIP is one address and its holder.
type HeldIP struct {
	EgressIP string `json:"egressIP"`
	Node     string `json:"node"`
}

// EgressGatewayList is a list of them.
type EgressGatewayList kubeapi.List[EgressGateway]

// DeepCopyObject implements runtime.Object.
func (g *EgressGateway) DeepCopyObject() runtime.Object {
	out := &EgressGateway{TypeMeta: g.TypeMeta, ObjectMeta: *g.ObjectMeta.DeepCopy()}
	out.Spec = GatewaySpec{
		PodSelector:       g.Spec.PodSelector.DeepCopy(),
		NamespaceSelector: g.Spec.NamespaceSelector.DeepCopy(),
		EgressIPs:         append([]string(nil), g.Spec.EgressIPs...),
		NodeSelector:      g.Spec.NodeSelector.DeepCopy(),
		DestinationCIDRs:  append([]string(nil), g.Spec.DestinationCIDRs...),
	}
	out.Status.EgressIPs = append([]HeldIP(nil), g.Status.EgressIPs...)
	for _, c := range g.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, *c.DeepCopy())
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *EgressGatewayList) DeepCopyObject() runtime.Object {
	return (*EgressGatewayList)(kubeapi.DeepCopyList((*kubeapi.List[EgressGateway])(l)))
}
