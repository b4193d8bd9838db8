package cluster

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestSlimServices: the informers keep of a Service and an EndpointSlice
// what the Services proxy reads, keyed as the informer keys them, and of
// a Node its primary IPs and whether it is leaving.
func TestSlimServices(t *testing.T) {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: "3", Annotations: map[string]string{"big": "x"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1", "fd00::1"},
			Ports:                 []corev1.ServicePort{{Name: "h", Port: 80, NodePort: 30080}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 32000,
			Selector: map[string]string{"app": "web"}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}}}}
	got, _ := slim(s, keep{})
	want := &Service{Namespace: "ns", Name: "web", ResourceVersion: "3",
		ClusterIPs:      []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("fd00::1")},
		Ports:           []ServicePort{{Name: "h", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, ExternalLocal: true, HealthCheckNodePort: 32000}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("slim Service\n got %+v\nwant %+v", got, want)
	}
	if key, err := cache.MetaNamespaceKeyFunc(got); err != nil || key != "ns/web" {
		t.Errorf("the informer's key %q, %v", key, err)
	}
	if again, _ := slim(got, keep{}); again != got {
		t.Error("the transform does not pass a slim Service through")
	}
	trig := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1",
		Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
		Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: trig.Format(time.RFC3339)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: func() *int32 { p := int32(8080); return &p }()}, {Name: func() *string { s := "none"; return &s }()}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1", "10.0.0.9"}, NodeName: func() *string { s := "n1"; return &s }(),
			Conditions: discoveryv1.EndpointConditions{Terminating: func() *bool { b := true; return &b }()},
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}, ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}}}}
	gotES, _ := slim(es, keep{})
	wantES := &EndpointSlice{Namespace: "ns", Name: "web-1", Service: "web", AddressType: discoveryv1.AddressTypeIPv4, TriggerTime: trig,
		Ports: []EndpointPort{{Protocol: corev1.ProtocolTCP, Port: 8080}},
		Endpoints: []SliceEndpoint{{Addr: netip.MustParseAddr("10.0.0.1"), Ready: true, Serving: true, Terminating: true, Node: "n1",
			ZoneHints: []string{"z"}, NodeHints: []string{"n1"}}}}
	if !reflect.DeepEqual(gotES, wantES) {
		t.Errorf("slim EndpointSlice\n got %+v\nwant %+v", gotES, wantES)
	}
	now := metav1.Now()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", DeletionTimestamp: &now},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.1"},
			{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.3"},
			{Type: corev1.NodeExternalIP, Address: "2001:db8::1"}}}}
	gotN := NodeFromAPI(n)
	if want := []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("2001:db8::1")}; !reflect.DeepEqual(gotN.HostIPs, want) || !gotN.Leaving {
		t.Errorf("node's host IPs %v, leaving %v; want %v, true", gotN.HostIPs, gotN.Leaving, want)
	}
	n.DeletionTimestamp = nil
	n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}
	if !NodeFromAPI(n).Leaving {
		t.Error("a node the autoscaler tainted is not leaving")
	}
}

// TestSlimServiceReaders: the transform keeps the LoadBalancer IPAM's part
// of a Service when the cache is made with one (Config.LoadBalancer), and
// none without; a Service labelled for another proxy is skipped by the
// proxy but keeps its cluster IPs, which the domainNames resolvers trust
// whoever proxies the DNS Service.
func TestSlimServiceReaders(t *testing.T) {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns",
		Labels: map[string]string{labelServiceProxyName: "other"}},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}}}
	got, _ := slim(s, keep{})
	svc := got.(*Service)
	if !svc.Skip || !reflect.DeepEqual(svc.ClusterIPs, []netip.Addr{netip.MustParseAddr("10.96.0.10")}) || svc.LoadBalancer != nil {
		t.Errorf("another proxy's Service: skip %v, cluster IPs %v, load balancer %v; want true, [10.96.0.10], nil", svc.Skip, svc.ClusterIPs, svc.LoadBalancer)
	}
	seen := ""
	got, _ = slim(s, keep{loadBalancer: func(s *corev1.Service) any { seen = s.Name; return s.Name }})
	if lb := got.(*Service).LoadBalancer; lb != "kube-dns" || seen != "kube-dns" {
		t.Errorf("with Config.LoadBalancer: %v, want what it made of the API Service (kube-dns)", lb)
	}
}

func TestServiceCIDRFromAPI(t *testing.T) {
	in := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", ResourceVersion: "7"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/12", "fd00:10:96::1/112", "bad"}}}
	got, _ := slim(in, keep{})
	c, ok := got.(*ServiceCIDR)
	if !ok {
		t.Fatalf("slim: %T, want *ServiceCIDR", got)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/112")}
	if c.Key() != "kubernetes" || !slices.Equal(c.CIDRs, want) || c.ResourceVersion != "7" {
		t.Errorf("%+v, want kubernetes %v", c, want)
	}
}
