package kubeapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// A KeySet answers "does namespace/name exist?" through what a reflector
// does to it: a list replaces the set, a watch adds and deletes, a delete
// whose object the watch missed (DeletedFinalStateUnknown) still removes
// the key. It slims what the reflector's streaming list holds.
func TestKeySet(t *testing.T) {
	pod := func(ns, name string) *metav1.PartialObjectMetadata {
		p := &metav1.PartialObjectMetadata{}
		p.Namespace, p.Name = ns, name
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		return p
	}
	s := &KeySet{keys: map[string]struct{}{}}
	if s.Synced() {
		t.Fatal("synced before a list")
	}
	if err := s.Replace([]any{pod("a", "1"), pod("a", "2")}, "10"); err != nil {
		t.Fatal(err)
	}
	if !s.Synced() || !s.Has("a/1") || !s.Has("a/2") || s.Has("b/1") {
		t.Fatalf("after the list: synced %v, keys %v", s.Synced(), s.keys)
	}
	_ = s.Add(pod("b", "1"))
	_ = s.Delete(pod("a", "1"))
	_ = s.Delete(cache.DeletedFinalStateUnknown{Key: "a/2", Obj: pod("a", "2")})
	if s.Has("a/1") || s.Has("a/2") || !s.Has("b/1") {
		t.Errorf("after add b/1, delete a/1 and a/2: keys %v", s.keys)
	}
	if err := s.Replace([]any{pod("c", "1")}, "20"); err != nil || s.Has("b/1") || !s.Has("c/1") {
		t.Errorf("a relist keeps what it does not list: keys %v (%v)", s.keys, err)
	}
	out, _ := s.Transformer()(pod("a", "1"))
	if p := out.(*metav1.PartialObjectMetadata); p.ManagedFields != nil || p.Name != "1" || p.Namespace != "a" {
		t.Errorf("the transform kept %+v", p.ObjectMeta)
	}
}
