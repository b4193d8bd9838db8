package kubelease

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// TestTransform: the informers keep a node's name, resource version,
// flannel's (and cnibox's) annotations and pod CIDRs, nothing else; a
// node's metadata gives the same, its pod CIDRs from the annotation.
func TestTransform(t *testing.T) {
	an, _ := NewAnnotations(DefaultAnnotationPrefix)
	m := &Manager{an: an}
	meta := metav1.ObjectMeta{
		Name: "n1", ResourceVersion: "42", UID: "u",
		Labels: map[string]string{"kubernetes.io/hostname": "n1", MetaLabel: "true"},
		Annotations: map[string]string{
			an.BackendData: `{"VNI":1,"VtepMAC":"0a:58:0a:00:00:01"}`, an.PublicIP: "192.0.2.1", an.PodCIDRs: "10.244.1.0/24,fd00:1::/64",
			"node.alpha.kubernetes.io/ttl": "0",
		},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)}},
	}
	want := &kubeapi.Node{}
	want.Name, want.ResourceVersion = "n1", "42"
	want.Annotations = map[string]string{an.BackendData: meta.Annotations[an.BackendData], an.PublicIP: "192.0.2.1", an.PodCIDRs: "10.244.1.0/24,fd00:1::/64"}
	want.Spec.PodCIDRs = []string{"10.244.1.0/24", "fd00:1::/64"}

	full := &kubeapi.Node{ObjectMeta: meta, Spec: kubeapi.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:1::/64"}}}
	for name, in := range map[string]any{"whole Node": full, "metadata": &metav1.PartialObjectMetadata{ObjectMeta: meta}} {
		got, err := m.transform(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("transform(%s) = %+v, %v; want %+v", name, got, err, want)
		}
		again, _ := m.transform(got)
		if !reflect.DeepEqual(again, want) {
			t.Errorf("transform(transform(%s)) = %+v; want it unchanged", name, again)
		}
	}
}
