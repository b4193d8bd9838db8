//go:build kube

package policy

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/test/kube"
)

// resolverSink records the model's resolvers at each call.
type resolverSink struct {
	mu  sync.Mutex
	got []netip.Addr
}

func (s *resolverSink) Apply(m *policymodel.Model, _ policymodel.Delta) error {
	s.mu.Lock()
	s.got = slices.Clone(m.Resolvers)
	s.mu.Unlock()
	return nil
}

func (s *resolverSink) wait(t *testing.T, what string, want ...string) {
	t.Helper()
	var w []netip.Addr
	for _, a := range want {
		w = append(w, netip.MustParseAddr(a))
	}
	slices.SortFunc(w, netip.Addr.Compare)
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.mu.Lock()
		got := s.got
		s.mu.Unlock()
		if slices.Equal(got, w) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the model's resolvers %v, want %v", what, got, w)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWatchKubeResolvers: with domainNames on, the watcher trusts the
// cluster DNS Service's cluster IP, its EndpointSlices' endpoints and the
// static resolvers, and follows them as they change; a Service of the
// same name in another namespace, and another Service's slices, are not
// trusted.
func TestWatchKubeResolvers(t *testing.T) {
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{"dns-sys", "tenant"} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		must(t, err)
	}
	sink := &resolverSink{}
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "n1"}, Syncer: sink,
			DomainNames: true, DNSService: "dns-sys/kube-dns", DNSResolvers: []netip.Addr{netip.MustParseAddr("169.254.20.10")}})
	}()
	sink.wait(t, "no DNS Service yet", "169.254.20.10")

	svc := func(ns, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns}, Spec: corev1.ServiceSpec{
			ClusterIP: ip, Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}
	}
	_, err := cs.CoreV1().Services("tenant").Create(ctx, svc("tenant", "10.96.0.99"), metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().Services("dns-sys").Create(ctx, svc("dns-sys", "10.96.0.53"), metav1.CreateOptions{})
	must(t, err)
	sink.wait(t, "the DNS Service", "10.96.0.53", "169.254.20.10")

	slice := func(ns, name, service string, addrs ...string) *discoveryv1.EndpointSlice {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: service}}, AddressType: discoveryv1.AddressTypeIPv4}
		for _, a := range addrs {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return es
	}
	for _, es := range []*discoveryv1.EndpointSlice{
		slice("dns-sys", "kube-dns-1", "kube-dns", "10.244.1.5", "10.244.2.7"),
		slice("tenant", "kube-dns-1", "kube-dns", "10.244.9.9"), // another namespace's
		slice("dns-sys", "other-1", "other", "10.244.8.8"),      // another Service's
	} {
		_, err := cs.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es, metav1.CreateOptions{})
		must(t, err)
	}
	sink.wait(t, "the DNS Service's endpoints", "10.96.0.53", "10.244.1.5", "10.244.2.7", "169.254.20.10")

	must(t, cs.DiscoveryV1().EndpointSlices("dns-sys").Delete(ctx, "kube-dns-1", metav1.DeleteOptions{}))
	sink.wait(t, "the endpoints gone", "10.96.0.53", "169.254.20.10")
	must(t, cs.CoreV1().Services("dns-sys").Delete(ctx, "kube-dns", metav1.DeleteOptions{}))
	sink.wait(t, "the Service gone", "169.254.20.10")

	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Watch: %v", err)
	}
}
