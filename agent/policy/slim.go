package policy

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// The watcher's informers keep what the engine reads, not the API objects:
// every pod of the cluster is held (any can be a peer), and a whole Pod is
// kilobytes (spec, status, managed fields) where a Pod of the engine is a
// few hundred bytes. Policies are few; they lose their managed fields,
// annotations (kubectl's last-applied copy) and status.

// slimPod is what an informer stores of a Pod: the engine's Pod and the
// resource version. Its metadata (what the informer's key and the
// reflector read) is made when asked for (GetObjectMeta) rather than held:
// an ObjectMeta is ~250 bytes of fields that are empty but three, for
// every pod of the cluster.
type slimPod struct {
	Pod             Pod
	ResourceVersion string
}

// GetObjectKind implements runtime.Object: a slim pod has no kind.
func (p *slimPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. The engine never changes a Pod
// it was given, so the copy shares the labels, addresses and ports.
func (p *slimPod) DeepCopyObject() runtime.Object {
	out := *p
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor (meta.Accessor): the
// name, namespace and resource version.
func (p *slimPod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.Pod.Name, Namespace: p.Pod.Namespace, ResourceVersion: p.ResourceVersion}
}

// SlimObj is what an informer stores of an object whose engine form is a
// T: the metadata an informer's key and watch need (meta), and the T.
type SlimObj[T any] struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Obj T
}

// DeepCopyObject implements runtime.Object (sharing the labels, as
// slimPod).
func (o *SlimObj[T]) DeepCopyObject() runtime.Object {
	out := *o
	return &out
}

// slimNamespace is what an informer stores of a Namespace; slimNode, of a
// Node (its labels and addresses, a `nodes` peer's, not its status,
// images and conditions).
type (
	slimNamespace = SlimObj[Namespace]
	slimNode      = SlimObj[Node]
)

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
	case *corev1.Pod:
		sp := &slimPod{Pod: *PodFromAPI(o), ResourceVersion: o.ResourceVersion}
		internPod(&sp.Pod)
		return sp, nil
	case *corev1.Namespace:
		sn := &slimNamespace{ObjectMeta: meta(&o.ObjectMeta), Obj: *NamespaceFromAPI(o)}
		sn.UID = o.UID // the Event about a bad annotation names the object
		return sn, nil
	case *corev1.Node:
		return &slimNode{ObjectMeta: meta(&o.ObjectMeta), Obj: *NodeFromAPI(o)}, nil
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
