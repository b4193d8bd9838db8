package policy

import (
	"reflect"
	"testing"

	nv1 "k8s.io/api/networking/v1"
)

// TestSlim: the policies' informers keep of a policy its spec, without
// its annotations.
func TestSlim(t *testing.T) {
	pol := np("x", "p", nv1.NetworkPolicySpec{PodSelector: *sel("pod", "a")})
	pol.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"}
	sn, _ := slim(pol)
	if s := sn.(*nv1.NetworkPolicy); s.Annotations != nil || !reflect.DeepEqual(s.Spec, pol.Spec) {
		t.Errorf("policy %+v", s)
	}
}
