package policy

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSlim: the informers keep of a Pod what the engine reads, and the
// transform passes slim objects through (it must be idempotent).
func TestSlim(t *testing.T) {
	p := apiPod("x", "a")
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	p.Annotations = map[string]string{"big": "x"}
	got, err := slim(p)
	if err != nil {
		t.Fatal(err)
	}
	sp := got.(*slimPod)
	if sp.Name != "a" || sp.Namespace != "x" || sp.ManagedFields != nil || sp.Annotations != nil {
		t.Errorf("metadata kept: %+v", sp.ObjectMeta)
	}
	if !reflect.DeepEqual(sp.Pod, *PodFromAPI(p)) || len(sp.Pod.Ports) != 7 {
		t.Errorf("pod %+v, want %+v", sp.Pod, *PodFromAPI(p))
	}
	if again, _ := slim(sp); again != any(sp) {
		t.Errorf("slim of a slim pod is a new object")
	}
	pol := np("x", "p", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a")})
	pol.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"}
	sn, _ := slim(pol)
	if s := sn.(*nv1.NetworkPolicy); s.Annotations != nil || !reflect.DeepEqual(s.Spec, pol.Spec) {
		t.Errorf("policy %+v", s)
	}
	ns, _ := slim(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"ns": "x"}}})
	if n := ns.(*slimNamespace); n.Namespace.Name != "x" || n.Namespace.Labels["ns"] != "x" {
		t.Errorf("namespace %+v", n)
	}
}
