package policy

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// The watcher's informers of policies keep what the engine reads: they lose
// their managed fields, annotations (kubectl's last-applied copy) and
// status. Pods, namespaces and nodes are the agent's informer cache's
// (agent/cluster), slimmed there once for every reader.

// SlimObj is what an informer stores of an object whose engine form is a
// T: the metadata an informer's key and watch need (meta), and the T.
type SlimObj[T any] struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Obj T
}

// DeepCopyObject implements runtime.Object (sharing what the T
// holds: nothing changes it).
func (o *SlimObj[T]) DeepCopyObject() runtime.Object {
	out := *o
	return &out
}

// meta is the part of m an informer's key and watch need.
func meta(m *metav1.ObjectMeta) metav1.ObjectMeta { return SlimMeta(m) }

// SlimMeta is the part of m an informer's key and watch need (for
// SlimObj).
func SlimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, ResourceVersion: m.ResourceVersion}
}

// slim is the informers' transform: it keeps of each object what the engine
// reads. It passes what it does not know, and slim objects, through.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *networkingv1.NetworkPolicy:
		out := &networkingv1.NetworkPolicy{ObjectMeta: meta(&o.ObjectMeta), Spec: o.Spec}
		out.UID = o.UID // the Event about an issue names the object
		return out, nil
	case *cnpv1.ClusterNetworkPolicy:
		out := &cnpv1.ClusterNetworkPolicy{ObjectMeta: meta(&o.ObjectMeta), Spec: o.Spec}
		out.UID = o.UID
		return out, nil
	}
	return obj, nil
}
