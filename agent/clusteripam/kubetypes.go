//go:build !nokube

package clusteripam

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cnibox/cnibox/internal/wbpool"
)

// The CRDs' objects as whereabouts v0.9.4 defines them
// (pkg/api/whereabouts.cni.cncf.io/v1alpha1), written by hand so the agent
// links no generated clientset.

// groupVersion is whereabouts.cni.cncf.io/v1alpha1.
var groupVersion = schema.GroupVersion{Group: wbpool.Group, Version: wbpool.Version}

// stickyAnnotation holds a pool's remembered holders (offset ->
// "podref/ifname"), which whereabouts neither reads nor changes.
const stickyAnnotation = "cnibox.io/whereabouts-sticky"

// list is the list kind of the objects T (*T, P, is a runtime.Object).
type list[T any, P interface {
	*T
	runtime.Object
}] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []T `json:"items"`
}

func (o *list[T, P]) DeepCopyObject() runtime.Object {
	out := &list[T, P]{TypeMeta: o.TypeMeta}
	o.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range o.Items {
		out.Items = append(out.Items, *P(&o.Items[i]).DeepCopyObject().(P))
	}
	return out
}

type ipPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ipPoolSpec `json:"spec"`
}

type ipPoolSpec struct {
	Range       string                       `json:"range"`
	Allocations map[string]wbpool.Allocation `json:"allocations"`
}

type ipPoolList = list[ipPool, *ipPool]

type reservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Reservation `json:"spec"`
}

type reservationList = list[reservation, *reservation]

type nodeSlicePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Range     string `json:"range"`
		SliceSize string `json:"sliceSize"`
	} `json:"spec"`
	Status struct {
		Allocations []Slice `json:"allocations"`
	} `json:"status"`
}

type nodeSlicePoolList = list[nodeSlicePool, *nodeSlicePool]

// lease is the part of a coordination.k8s.io/v1 Lease leader election uses.
type lease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              leaseSpec `json:"spec"`
}

type leaseSpec struct {
	HolderIdentity       *string           `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds *int32            `json:"leaseDurationSeconds,omitempty"`
	RenewTime            *metav1.MicroTime `json:"renewTime,omitempty"`
	LeaseTransitions     *int32            `json:"leaseTransitions,omitempty"`
}

func (o *ipPool) DeepCopyObject() runtime.Object {
	out := *o
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Allocations = make(map[string]wbpool.Allocation, len(o.Spec.Allocations))
	for k, v := range o.Spec.Allocations {
		out.Spec.Allocations[k] = v
	}
	return &out
}

func (o *reservation) DeepCopyObject() runtime.Object {
	out := *o
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func (o *nodeSlicePool) DeepCopyObject() runtime.Object {
	out := *o
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Allocations = append([]Slice(nil), o.Status.Allocations...)
	return &out
}

func (o *lease) DeepCopyObject() runtime.Object {
	out := *o
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// addTypes registers the objects under their kinds.
func addTypes(s *runtime.Scheme) {
	for kind, obj := range map[string]runtime.Object{
		"IPPool": &ipPool{}, "IPPoolList": &ipPoolList{},
		"OverlappingRangeIPReservation": &reservation{}, "OverlappingRangeIPReservationList": &reservationList{},
		"NodeSlicePool": &nodeSlicePool{}, "NodeSlicePoolList": &nodeSlicePoolList{},
	} {
		s.AddKnownTypeWithName(groupVersion.WithKind(kind), obj)
	}
	metav1.AddToGroupVersion(s, groupVersion)
}
