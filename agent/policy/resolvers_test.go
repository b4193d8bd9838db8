//go:build !nokube

package policy

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/cluster"
)

// TestResolvers: the trusted resolvers are the DNS Service's cluster IPs
// and its endpoints' addresses (whatever their conditions) with the
// static ones, sorted and each once; a policy's change keeps them; bad
// --dns-service values are refused with the shape to use.
func TestResolvers(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00:96::a"}}}
	notReady := false
	eps := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.244.1.5"}},
		{Addresses: []string{"10.244.2.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}},
	}}
	got := resolverAddrs([]any{cluster.ServiceFromAPI(svc)}, []any{cluster.EndpointSliceFromAPI(eps)})
	e := NewEngine("n1")
	if !e.SetResolvers(append(got, netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("::ffff:10.96.0.10"))) {
		t.Fatal("SetResolvers on an empty model: no change")
	}
	want := []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.7"),
		netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("fd00:96::a")}
	if !slices.Equal(e.Model().Resolvers, want) {
		t.Errorf("resolvers %v, want %v", e.Model().Resolvers, want)
	}
	if e.SetResolvers(slices.Clone(want)) {
		t.Error("the same resolvers again: a change")
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "p"}}
	e.SetNetworkPolicy(np) // the model is made again
	if !slices.Equal(e.Model().Resolvers, want) {
		t.Errorf("after a policy's change the resolvers are %v, want %v", e.Model().Resolvers, want)
	}
	if !e.SetResolvers(nil) || e.Model().Resolvers != nil {
		t.Errorf("no resolvers: %v", e.Model().Resolvers)
	}

	for _, s := range []string{"kube-dns", "/kube-dns", "kube-system/", "a/b/c"} {
		if _, _, err := ParseDNSService(s); err == nil {
			t.Errorf("ParseDNSService(%q): no error", s)
		}
	}
	if ns, name, err := ParseDNSService("kube-system/kube-dns"); err != nil || ns != "kube-system" || name != "kube-dns" {
		t.Errorf("ParseDNSService: %q %q %v", ns, name, err)
	}
}
