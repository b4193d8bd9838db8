//go:build kube

package cluster_test

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lbipam"
	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/agent/services"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/test/kube"
)

// nopTable is a Services table that writes nothing and tells of its first
// write.
type nopTable struct {
	once    sync.Once
	written chan struct{}
}

func (t *nopTable) Apply(*svcmodel.Snapshot) error {
	t.once.Do(func() { close(t.written) })
	return nil
}
func (t *nopTable) Resync(*svcmodel.Snapshot) error { return t.Apply(nil) }
func (t *nopTable) Delete() error                   { return nil }

// resolverSink keeps the model's trusted resolvers.
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

func (s *resolverSink) has(a string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.got, netip.MustParseAddr(a))
}

// TestKubeOneServiceWatch: every reader of Services and EndpointSlices the
// agent can run at once (the Services proxy, the NetworkPolicy watcher's
// domainNames resolvers, the elected LoadBalancer IPAM), wired as
// cnibox-agent wires them (one cluster.Cache, made with lbipam's
// ServiceView), against a real API server (test/kube): once each has read
// them (the proxy has written its table, the watcher trusts the DNS
// Service's cluster IP and its endpoint, the IPAM gave a Service an
// address), the API server has one watch of the Services open and one of
// the EndpointSlices, whatever their namespace. Before, the resolvers and
// the IPAM each ran informers of their own: three watches of the Services
// and two of the slices.
func TestKubeOneServiceWatch(t *testing.T) {
	kc := kube.Start(t, nil)
	cs := kube.Clientset(t, kc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	crd, err := os.ReadFile("../../deploy/kubernetes/loadbalancerippool-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/loadbalancerippools")
	must(t, cs.CoreV1().RESTClient().Post().AbsPath("/apis/cnibox.io/v1alpha1/loadbalancerippools").
		Body([]byte(`{"apiVersion":"cnibox.io/v1alpha1","kind":"LoadBalancerIPPool","metadata":{"name":"p"},"spec":{"blocks":[{"cidr":"192.0.2.0/29"}]}}`)).
		SetHeader("Content-Type", "application/json").Do(ctx).Error())
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dns"}}, metav1.CreateOptions{})
	must(t, err)
	dns, err := cs.CoreV1().Services("dns").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.DiscoveryV1().EndpointSlices("dns").Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.53"}}}}, metav1.CreateOptions{})
	must(t, err)

	api := newAPICounter(t, kc)
	c := kubeapi.Cluster{Kubeconfig: kc, APIURL: api.url, NodeName: "n1"}
	shared := cluster.NewWith(cluster.Config{Cluster: c, ClusterPods: true, LoadBalancer: lbipam.ServiceView})
	shared.Start(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	table := &nopTable{written: make(chan struct{})}
	run(func() {
		err := services.Watch(ctx, services.WatchConfig{Cache: shared, Table: table, Resync: time.Hour,
			IfaceAddrs: func() ([]netip.Addr, error) { return nil, nil }})
		if err != nil {
			t.Errorf("services.Watch: %v", err)
		}
	})
	sink := &resolverSink{}
	run(func() {
		err := policy.Watch(ctx, policy.WatchConfig{Cluster: c, Cache: shared, Syncer: sink, DomainNames: true, DNSService: "dns/kube-dns"})
		if err != nil {
			t.Errorf("policy.Watch: %v", err)
		}
	})
	run(func() {
		err := lbipam.Run(ctx, lbipam.Config{Cluster: c, Cache: shared, Every: 200 * time.Millisecond, CRDPoll: 200 * time.Millisecond})
		if err != nil {
			t.Errorf("lbipam.Run: %v", err)
		}
	})
	_, err = cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}},
		metav1.CreateOptions{})
	must(t, err)

	waitFor(t, "the three readers up", func() bool {
		select {
		case <-table.written:
		default:
			return false
		}
		lb, err := cs.CoreV1().Services("default").Get(ctx, "lb", metav1.GetOptions{})
		return err == nil && len(lb.Status.LoadBalancer.Ingress) > 0 && sink.has(dns.Spec.ClusterIP) && sink.has("10.244.0.53")
	})
	// by resource is f's count of every path of each resource, whatever
	// its namespace.
	byResource := func(m map[string]int) map[string]int {
		out := map[string]int{}
		for p, n := range m {
			for _, r := range []string{"services", "endpointslices"} {
				if strings.HasSuffix(p, "/"+r) {
					out[r] += n
				}
			}
		}
		return out
	}
	waitFor(t, "a watch of the Services and of the EndpointSlices", func() bool {
		return api.count(func(c *apiCounter) int { o := byResource(c.open); return min(o["services"], o["endpointslices"]) }) > 0
	})
	api.mu.Lock()
	defer api.mu.Unlock()
	open := byResource(api.open)
	for _, r := range []string{"services", "endpointslices"} {
		if open[r] != 1 {
			t.Errorf("%s: the API server has %d watches open, want one (watches opened by path, the streaming lists it refused among them: %v)", r, open[r], api.watches)
		}
	}
	t.Logf("lists %v, watches opened %v, open %v", api.lists, api.watches, api.open)
}
