//go:build !nokube

package lbipam

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestServiceView: the cache keeps the controller's part of a Service of
// type LoadBalancer, of one whose status it wrote or that holds an
// address (another controller's: no pool hands that address out), and
// nothing of the others, which the plan never reads.
func TestServiceView(t *testing.T) {
	other := "example.com/other"
	for _, c := range []struct {
		name string
		svc  corev1.Service
		kept bool
	}{
		{"LoadBalancer", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}, true},
		{"ClusterIP", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, false},
		{"another class, an address", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &other},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.9"}}}}}, true},
		{"another class, no address", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &other}}, false},
		{"ours, no longer LoadBalancer", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
			Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: Condition}}}}, true},
	} {
		s := c.svc
		s.Namespace, s.Name = "default", "s"
		v := ServiceView(&s)
		if o, ok := v.(*svcObj); ok != c.kept || (ok && o.Key() != "default/s") {
			t.Errorf("%s: %#v, want kept %v", c.name, v, c.kept)
		}
	}
}

// TestServiceAnnotations: MetalLB's annotations are read under both its
// prefixes, metallb.io/ winning over metallb.universe.tf/ as in MetalLB.
func TestServiceAnnotations(t *testing.T) {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s", Annotations: map[string]string{
		"metallb.universe.tf/address-pool": "old", "metallb.io/address-pool": " new ",
		"metallb.universe.tf/allow-shared-ip": "k",
		"metallb.io/loadBalancerIPs":          "192.0.2.1, 2001:db8::1",
	}}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: "192.0.2.9"}}
	o := serviceOf(s)
	if o.Pool != "new" || o.SharingKey != "k" || len(o.Requested) != 2 || o.Requested[0].String() != "192.0.2.1" || o.Requested[1].String() != "2001:db8::1" {
		t.Errorf("pool %q, key %q, requested %v: want new, k, [192.0.2.1 2001:db8::1]", o.Pool, o.SharingKey, o.Requested)
	}
	if got := AnnotationStable(AnnotationIPs); got != "metallb.io/loadBalancerIPs" {
		t.Errorf("AnnotationStable: %s", got)
	}
}
