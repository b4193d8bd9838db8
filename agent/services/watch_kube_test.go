//go:build kube

package services

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/test/kube"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// port is the port of the Service svc/web in snap, if any.
func port(snap *svcmodel.Snapshot) (svcmodel.ServicePort, bool) {
	for _, p := range snap.Flat() {
		if p.Name.Namespace == "svc" && p.Name.Name == "web" {
			return p, true
		}
	}
	return svcmodel.ServicePort{}, false
}

// TestWatchKube: a Service and its EndpointSlice created, updated and
// deleted in a real API server reach the table's Apply as the snapshot
// they make (frontends allocated by the API server, endpoints chosen by
// their conditions and the traffic policy, the node's primary IP serving
// NodePorts), through the agent's informer cache.
func TestWatchKube(t *testing.T) {
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}}}, metav1.CreateOptions{})
	must(t, err)
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	must(t, err)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	must(t, err)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svc"}}, metav1.CreateOptions{})
	must(t, err)

	c := cluster.NewWith(cluster.Config{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "node-a"}})
	c.Start(ctx)
	tab := newRecTable()
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, WatchConfig{Cache: c, Table: tab, Resync: time.Hour,
			IfaceAddrs: func() ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.1")}, nil
			}, NodePorts: NodePortAddresses{Primary: true}})
	}()
	defer func() { cancel(); must(t, <-done) }()
	if first := tab.next(t); !first.full {
		t.Fatalf("first call %+v, want a Resync", first)
	}
	// wait is the first Apply whose port of svc/web ok accepts.
	var last *svcmodel.Snapshot // of the last wait
	wait := func(what string, ok func(p svcmodel.ServicePort, found bool) bool) svcmodel.ServicePort {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case cl := <-tab.calls:
				if p, found := port(cl.snap); ok(p, found) {
					last = cl.snap
					return p
				}
			case <-deadline:
				t.Fatalf("%s: no such snapshot within a minute", what)
			}
		}
	}

	svc, err := cs.CoreV1().Services("svc").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	must(t, err)
	cip, np := netip.MustParseAddr(svc.Spec.ClusterIP), uint16(svc.Spec.Ports[0].NodePort)
	p := wait("the Service created", func(p svcmodel.ServicePort, found bool) bool { return found })
	want := fmt.Sprintf("ClusterIP:%s:80 NodePort:*:%d", cip, np)
	if got := fronts(p.Frontends); got != want || p.HasEndpoints || p.Protocol != svcmodel.TCP {
		t.Errorf("created: frontends %s, endpoints %v, protocol %s; want %s, none, TCP", got, p.HasEndpoints, p.Protocol, want)
	}

	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, NodeName: ptr("node-a")},
			{Addresses: []string{"10.1.0.2"}, NodeName: ptr("node-b"), Conditions: discoveryv1.EndpointConditions{Ready: no, Serving: yes, Terminating: yes}}}}
	es, err = cs.DiscoveryV1().EndpointSlices("svc").Create(ctx, es, metav1.CreateOptions{})
	must(t, err)
	p = wait("the slice created", func(p svcmodel.ServicePort, _ bool) bool { return p.HasEndpoints })
	if got := addrs(p.ClusterEndpoints); got != "10.1.0.1:8080" {
		t.Errorf("slice created: cluster endpoints %q, want the ready one only", got)
	}

	es.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: no, Serving: yes, Terminating: yes}
	_, err = cs.DiscoveryV1().EndpointSlices("svc").Update(ctx, es, metav1.UpdateOptions{})
	must(t, err)
	p = wait("the slice updated", func(p svcmodel.ServicePort, _ bool) bool { return len(p.ClusterEndpoints) == 2 })
	if got := addrs(p.ClusterEndpoints); got != "10.1.0.1:8080 10.1.0.2:8080" {
		t.Errorf("none ready: cluster endpoints %q, want both serving terminating ones", got)
	}

	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	_, err = cs.CoreV1().Services("svc").Update(ctx, svc, metav1.UpdateOptions{})
	must(t, err)
	p = wait("the Service updated", func(p svcmodel.ServicePort, _ bool) bool { return p.ExternalLocal })
	if got := addrs(p.LocalEndpoints); got != "10.1.0.1:8080" {
		t.Errorf("externalTrafficPolicy Local: local endpoints %q, want node-a's", got)
	}

	must(t, cs.DiscoveryV1().EndpointSlices("svc").Delete(ctx, "web-1", metav1.DeleteOptions{}))
	wait("the slice deleted", func(p svcmodel.ServicePort, found bool) bool { return found && !p.HasEndpoints })
	must(t, cs.CoreV1().Services("svc").Delete(ctx, "web", metav1.DeleteOptions{}))
	wait("the Service deleted", func(_ svcmodel.ServicePort, found bool) bool { return !found })

	// The snapshot's NodePort addresses: the node's primary IP of the
	// interface addresses.
	_, err = cs.CoreV1().Services("svc").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	must(t, err)
	var npa []netip.Addr
	wait("the Service again", func(_ svcmodel.ServicePort, found bool) bool { return found })
	npa = last.NodePortAddrs
	if fmt.Sprint(npa) != "[192.0.2.1]" {
		t.Errorf("NodePort addresses %v, want the node's primary IP [192.0.2.1] of the interfaces' 192.0.2.1 and 198.51.100.1", npa)
	}

	// The Service ranges: the API server's own ServiceCIDR and one
	// created, then deleted, reach the snapshot.
	extra := netip.MustParsePrefix("10.200.0.0/24")
	waitCIDRs := func(what string, ok func([]netip.Prefix) bool) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case cl := <-tab.calls:
				if ok(cl.snap.ServiceCIDRs) {
					return
				}
			case <-deadline:
				t.Fatalf("%s: no such snapshot within a minute", what)
			}
		}
	}
	_, err = cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{extra.String()}}}, metav1.CreateOptions{})
	must(t, err)
	waitCIDRs("a ServiceCIDR created", func(ps []netip.Prefix) bool {
		return slices.Contains(ps, extra) && slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(cip) })
	})
	must(t, cs.NetworkingV1().ServiceCIDRs().Delete(ctx, "extra", metav1.DeleteOptions{}))
	waitCIDRs("the ServiceCIDR deleted", func(ps []netip.Prefix) bool {
		return !slices.Contains(ps, extra) && slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(cip) })
	})
}
