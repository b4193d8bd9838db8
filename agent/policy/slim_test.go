package policy

import (
	"reflect"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
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
	m, err := apimeta.Accessor(sp)
	if err != nil || m.GetName() != "a" || m.GetNamespace() != "x" || m.GetResourceVersion() != p.ResourceVersion {
		t.Errorf("the informer's view of the slim pod: %v, %v", m, err)
	}
	if key, err := cache.MetaNamespaceKeyFunc(sp); err != nil || key != "x/a" {
		t.Errorf("the informer's key %q, %v", key, err)
	}
	kept := sp.Pod
	kept.labels = nil // the interned set behind Labels
	if !reflect.DeepEqual(kept, *PodFromAPI(p)) || len(sp.Pod.Ports) != 7 {
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
	if n := ns.(*slimNamespace); n.Obj.Name != "x" || n.Obj.Labels["ns"] != "x" {
		t.Errorf("namespace %+v", n)
	}
}

// TestInternLabels: pods with the same labels share one map (and one copy
// of each string), and a label set no pod holds any more is forgotten.
func TestInternLabels(t *testing.T) {
	a, b := apiPod("x", "a"), apiPod("x", "b")
	a.Labels = map[string]string{"app": "web", "pod-template-hash": "5d8f"}
	b.Labels = map[string]string{"pod-template-hash": "5d8f", "app": "web"}
	sa, _ := slim(a)
	sb, _ := slim(b)
	pa, pb := &sa.(*slimPod).Pod, &sb.(*slimPod).Pod
	if reflect.ValueOf(pa.Labels).Pointer() != reflect.ValueOf(pb.Labels).Pointer() {
		t.Error("two pods with the same labels hold two maps")
	}
	if pa.Labels["app"] != "web" || len(pa.Labels) != 2 {
		t.Errorf("labels %v", pa.Labels)
	}
	key := "once\x00" + t.Name() + "\x00"
	func() {
		c := apiPod("x", "c")
		c.Labels = map[string]string{"once": t.Name()}
		if _, err := slim(c); err != nil {
			t.Fatal(err)
		}
	}()
	labelSets.Lock()
	_, held := labelSets.byKey[key]
	labelSets.Unlock()
	if !held {
		t.Fatalf("no label set %q after slim", key)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		labelSets.Lock()
		_, held := labelSets.byKey[key]
		labelSets.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the label set of a pod that is gone is still held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(pa)
	runtime.KeepAlive(pb)
}
