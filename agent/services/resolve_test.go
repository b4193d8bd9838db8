package services

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The resolution's tests build API objects, read them as the cache does
// (cluster.ServiceFromAPI, EndpointSliceFromAPI) and check the ports
// resolved: each case is one of kube-proxy's rules, and fails on a
// resolver that breaks it.

const thisNode, thisZone = "node-a", "zone-a"

func ptr[T any](v T) *T { return &v }

// svc is a ClusterIP Service ns/web with one TCP port "http" 80 (to
// change with the options).
func svc(opts ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ep is an endpoint on node (ready unset unless conditions say).
type ep struct {
	addr, node, zone     string
	ready, serving, term *bool
	zones, nodes         []string
}

// slice is an EndpointSlice of ns/web named name with the port "http"
// 8080/TCP and eps.
func slice(name string, eps ...ep) *discoveryv1.EndpointSlice {
	return sliceOf(name, discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}}, eps...)
}

func sliceOf(name string, typ discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: typ, Ports: ports}
	for _, e := range eps {
		de := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.term}}
		if e.node != "" {
			de.NodeName = ptr(e.node)
		}
		if e.zone != "" {
			de.Zone = ptr(e.zone)
		}
		if len(e.zones)+len(e.nodes) > 0 {
			de.Hints = &discoveryv1.EndpointHints{}
			for _, z := range e.zones {
				de.Hints.ForZones = append(de.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
			for _, n := range e.nodes {
				de.Hints.ForNodes = append(de.Hints.ForNodes, discoveryv1.ForNode{Name: n})
			}
		}
		s.Endpoints = append(s.Endpoints, de)
	}
	return s
}

var (
	yes, no = ptr(true), ptr(false)
)

// resolve is what the state resolves of s and slices for thisNode.
func resolve(s *corev1.Service, eps ...*discoveryv1.EndpointSlice) []svcmodel.ServicePort {
	var es []*cluster.EndpointSlice
	for _, e := range eps {
		es = append(es, cluster.EndpointSliceFromAPI(e))
	}
	return resolveService(cluster.ServiceFromAPI(s), es, Node{Name: thisNode, Zone: thisZone})
}

// addrs is "addr:port" of each endpoint.
func addrs(eps []svcmodel.Endpoint) string {
	var ss []string
	for _, e := range eps {
		ss = append(ss, e.String())
	}
	return strings.Join(ss, " ")
}

func fronts(fs []svcmodel.Frontend) string {
	var ss []string
	for _, f := range fs {
		a := "*"
		if f.Addr.IsValid() {
			a = f.Addr.String()
		}
		ss = append(ss, fmt.Sprintf("%s:%s:%d", f.Kind, a, f.Port))
	}
	return strings.Join(ss, " ")
}

// one is the only port of ports.
func one(t *testing.T, ports []svcmodel.ServicePort) svcmodel.ServicePort {
	t.Helper()
	if len(ports) != 1 {
		t.Fatalf("%d ports resolved, want 1: %+v", len(ports), ports)
	}
	return ports[0]
}

func TestResolveSkips(t *testing.T) {
	for name, s := range map[string]*corev1.Service{
		"headless":      svc(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
		"no cluster IP": svc(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
		"ExternalName": svc(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.org"
		}),
		// kube-proxy's informers select these out (the e2e specs
		// service.kubernetes.io/service-proxy-name and /headless)
		"another proxy's": svc(func(s *corev1.Service) {
			s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "foo-bar"}
		}),
		"headless for proxies": svc(func(s *corev1.Service) { s.Labels = map[string]string{"service.kubernetes.io/headless": ""} }),
	} {
		t.Run(name, func(t *testing.T) {
			if got := resolve(s, slice("a", ep{addr: "10.0.0.1"})); len(got) != 0 {
				t.Errorf("resolved %+v, want nothing (kube-proxy leaves it alone)", got)
			}
		})
	}
}

func TestResolveFrontends(t *testing.T) {
	dual := func(s *corev1.Service) {
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	lb := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30080
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {IP: "192.0.2.11", IPMode: ptr(corev1.LoadBalancerIPModeVIP)},
			{IP: "192.0.2.12", IPMode: ptr(corev1.LoadBalancerIPModeProxy)}, {Hostname: "lb.example.org"}, {IP: "2001:db8::10"}}
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want []string // frontends per port, in order
	}{
		{"cluster IP", svc(), []string{"ClusterIP:10.96.0.10:80"}},
		{"single-stack IPv6", svc(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00:96::10", []string{"fd00:96::10"} }),
			[]string{"ClusterIP:fd00:96::10:80"}},
		{"dual stack: a port per family", svc(dual), []string{"ClusterIP:10.96.0.10:80", "ClusterIP:fd00:96::10:80"}},
		{"NodePort", svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = 30080 }),
			[]string{"ClusterIP:10.96.0.10:80 NodePort:*:30080"}},
		{"externalIPs of the port's family", svc(dual, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"198.51.100.7", "2001:db8::7"} }),
			[]string{"ClusterIP:10.96.0.10:80 ExternalIP:198.51.100.7:80", "ClusterIP:fd00:96::10:80 ExternalIP:2001:db8::7:80"}},
		{"LoadBalancer ingress IPs in VIP mode, not Proxy mode", svc(lb),
			[]string{"ClusterIP:10.96.0.10:80 NodePort:*:30080 LoadBalancer:192.0.2.10:80 LoadBalancer:192.0.2.11:80"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range resolve(tc.svc) {
				got = append(got, fronts(p.Frontends))
				for _, f := range p.Frontends {
					if f.Family != p.Family {
						t.Errorf("frontend %+v of a port of family %d", f, p.Family)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("frontends\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestResolvePortsByProtocol(t *testing.T) {
	s := svc(func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}, {Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53},
			{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 3868}}
	})
	es := sliceOf("a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{
		{Name: ptr("dns"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr(int32(5353))},
		{Name: ptr("dns-tcp"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(5354))},
		{Name: ptr("sig"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(9999))}, // the name, not the protocol: not sig's
		{Name: ptr("sig"), Protocol: ptr(corev1.ProtocolSCTP), Port: ptr(int32(3869))},
	}, ep{addr: "10.0.0.1"})
	got := map[string]string{}
	for _, p := range resolve(s, es) {
		got[p.Name.Port] = string(p.Protocol) + " " + addrs(p.ClusterEndpoints)
	}
	want := map[string]string{"dns": "UDP 10.0.0.1:5353", "dns-tcp": "TCP 10.0.0.1:5354", "sig": "SCTP 10.0.0.1:3869"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("port %s: %q, want %q", k, got[k], v)
		}
	}
}

func TestResolveEndpointChoice(t *testing.T) {
	local := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	internalLocal := func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal) }
	for _, tc := range []struct {
		name           string
		svc            *corev1.Service
		slices         []*discoveryv1.EndpointSlice
		cluster, local string
		hasEndpoints   bool
	}{
		{"ready unset is ready", svc(), []*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1"})}, "10.0.0.1:8080", "", true},
		{"not ready: not used", svc(), []*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", ready: no, serving: no}, ep{addr: "10.0.0.2"})},
			"10.0.0.2:8080", "", true},
		{"terminating: not used while one is ready", svc(),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", ready: no, serving: yes, term: yes}, ep{addr: "10.0.0.2", ready: yes})},
			"10.0.0.2:8080", "", true},
		{"none ready: serving terminating ones", svc(),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", ready: no, serving: yes, term: yes}, ep{addr: "10.0.0.2", ready: no, serving: no, term: yes})},
			"10.0.0.1:8080", "", true},
		{"none usable: no endpoints (reject)", svc(),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", ready: no, serving: no}, ep{addr: "10.0.0.2", ready: no, serving: no, term: yes})},
			"", "", false},
		{"no slice: no endpoints", svc(), nil, "", "", false},
		{"externalTrafficPolicy Local: this node's", svc(local),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", node: "node-b"}, ep{addr: "10.0.0.2", node: thisNode})},
			"10.0.0.1:8080 10.0.0.2:8080", "10.0.0.2:8080", true},
		{"externalTrafficPolicy Local, none here: endpoints elsewhere (drop, not reject)", svc(local),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", node: "node-b"})},
			"10.0.0.1:8080", "", true},
		{"Local falls back to this node's serving terminating ones while others are ready", svc(local),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", node: "node-b"}, ep{addr: "10.0.0.2", node: thisNode, ready: no, serving: yes, term: yes})},
			"10.0.0.1:8080", "10.0.0.2:8080", true},
		{"Local: a ready local one wins over a terminating local one", svc(local),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", node: thisNode, ready: no, serving: yes, term: yes}, ep{addr: "10.0.0.2", node: thisNode})},
			"10.0.0.2:8080", "10.0.0.2:8080", true},
		{"externalTrafficPolicy Local on a ClusterIP Service without externalIPs: no local set", svc(func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), []*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.2", node: thisNode})}, "10.0.0.2:8080", "", true},
		{"internalTrafficPolicy Local: no cluster set", svc(internalLocal),
			[]*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", node: "node-b"}, ep{addr: "10.0.0.2", node: thisNode})},
			"", "10.0.0.2:8080", true},
		{"internalTrafficPolicy Local with a NodePort: both sets", svc(internalLocal, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		}), []*discoveryv1.EndpointSlice{slice("a", ep{addr: "10.0.0.1", node: "node-b"}, ep{addr: "10.0.0.2", node: thisNode})},
			"10.0.0.1:8080 10.0.0.2:8080", "10.0.0.2:8080", true},
		{"zone hints: this zone's", svc(), []*discoveryv1.EndpointSlice{slice("a",
			ep{addr: "10.0.0.1", zones: []string{"zone-b"}}, ep{addr: "10.0.0.2", zones: []string{thisZone}})}, "10.0.0.2:8080", "", true},
		{"zone hints: all or nothing (one ready endpoint without)", svc(), []*discoveryv1.EndpointSlice{slice("a",
			ep{addr: "10.0.0.1"}, ep{addr: "10.0.0.2", zones: []string{thisZone}})}, "10.0.0.1:8080 10.0.0.2:8080", "", true},
		{"zone hints: an unready endpoint without one does not count", svc(), []*discoveryv1.EndpointSlice{slice("a",
			ep{addr: "10.0.0.1", ready: no, serving: no}, ep{addr: "10.0.0.2", zones: []string{thisZone}}, ep{addr: "10.0.0.3", zones: []string{"zone-b"}})},
			"10.0.0.2:8080", "", true},
		{"zone hints: none for this zone, every endpoint", svc(), []*discoveryv1.EndpointSlice{slice("a",
			ep{addr: "10.0.0.1", zones: []string{"zone-b"}}, ep{addr: "10.0.0.2", zones: []string{"zone-c"}})}, "10.0.0.1:8080 10.0.0.2:8080", "", true},
		{"node hints (PreferSameNode): this node's", svc(), []*discoveryv1.EndpointSlice{slice("a",
			ep{addr: "10.0.0.1", node: "node-b", nodes: []string{"node-b"}, zones: []string{thisZone}},
			ep{addr: "10.0.0.2", node: thisNode, nodes: []string{thisNode}, zones: []string{thisZone}})}, "10.0.0.2:8080", "", true},
		{"node hints for other nodes only: the zone hints", svc(), []*discoveryv1.EndpointSlice{slice("a",
			ep{addr: "10.0.0.1", nodes: []string{"node-b"}, zones: []string{thisZone}},
			ep{addr: "10.0.0.2", nodes: []string{"node-c"}, zones: []string{"zone-c"}})}, "10.0.0.1:8080", "", true},
		{"hints do not limit the local set", svc(local), []*discoveryv1.EndpointSlice{slice("a",
			ep{addr: "10.0.0.1", node: "node-b", zones: []string{thisZone}}, ep{addr: "10.0.0.2", node: thisNode, zones: []string{"zone-b"}})},
			"10.0.0.1:8080", "10.0.0.2:8080", true},
		{"an address in two slices counts once, as the local one", svc(local), []*discoveryv1.EndpointSlice{
			slice("a", ep{addr: "10.0.0.1", node: "node-b"}), slice("b", ep{addr: "10.0.0.1", node: thisNode})},
			"10.0.0.1:8080", "10.0.0.1:8080", true},
		{"FQDN slices and slices of no Service are ignored", svc(), []*discoveryv1.EndpointSlice{
			sliceOf("f", discoveryv1.AddressTypeFQDN, slice("x").Ports, ep{addr: "10.0.0.1"}),
			func() *discoveryv1.EndpointSlice { s := slice("n", ep{addr: "10.0.0.2"}); s.Labels = nil; return s }(),
			slice("a", ep{addr: "10.0.0.3"})}, "10.0.0.3:8080", "", true},
		{"an endpoint of the other family in an IPv4 slice is ignored", svc(), []*discoveryv1.EndpointSlice{slice("a", ep{addr: "fd00::1"}, ep{addr: "10.0.0.1"})},
			"10.0.0.1:8080", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := one(t, resolve(tc.svc, tc.slices...))
			if got := addrs(p.ClusterEndpoints); got != tc.cluster {
				t.Errorf("cluster endpoints %q, want %q", got, tc.cluster)
			}
			if got := addrs(p.LocalEndpoints); got != tc.local {
				t.Errorf("local endpoints %q, want %q", got, tc.local)
			}
			if p.HasEndpoints != tc.hasEndpoints {
				t.Errorf("HasEndpoints %v, want %v", p.HasEndpoints, tc.hasEndpoints)
			}
		})
	}
}

func TestResolveDualStackEndpoints(t *testing.T) {
	s := svc(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"} })
	v6 := sliceOf("b", discoveryv1.AddressTypeIPv6, slice("x").Ports, ep{addr: "fd00::1"})
	ports := resolve(s, slice("a", ep{addr: "10.0.0.1"}), v6)
	if len(ports) != 2 || ports[0].Family != svcmodel.IPv4 || ports[1].Family != svcmodel.IPv6 {
		t.Fatalf("ports %+v, want one IPv4 then one IPv6", ports)
	}
	if a, b := addrs(ports[0].ClusterEndpoints), addrs(ports[1].ClusterEndpoints); a != "10.0.0.1:8080" || b != "[fd00::1]:8080" {
		t.Errorf("endpoints %q and %q, want each family's own", a, b)
	}
}

func TestResolvePolicies(t *testing.T) {
	s := svc(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 32000
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(600))}}
		s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.0/24", "2001:db8:1::/48 "}
	})
	ports := resolve(s)
	if len(ports) != 2 {
		t.Fatalf("%d ports, want 2", len(ports))
	}
	for i, want := range []string{"203.0.113.0/24", "2001:db8:1::/48"} {
		p := ports[i]
		if len(p.SourceRanges) != 1 || p.SourceRanges[0].String() != want {
			t.Errorf("family %d: source ranges %v, want [%s] (the port's family's, trimmed)", p.Family, p.SourceRanges, want)
		}
		if p.AffinityTimeout != 600*time.Second || p.HealthCheckNodePort != 32000 || !p.ExternalLocal || p.InternalLocal {
			t.Errorf("family %d: affinity %v, health check port %d, external local %v, internal local %v; want 10m0s, 32000, true, false",
				p.Family, p.AffinityTimeout, p.HealthCheckNodePort, p.ExternalLocal, p.InternalLocal)
		}
	}
	t.Run("affinity's default timeout", func(t *testing.T) {
		p := one(t, resolve(svc(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP })))
		if p.AffinityTimeout != 3*time.Hour {
			t.Errorf("affinity %v, want the API's default 3h", p.AffinityTimeout)
		}
	})
	t.Run("health check port only for LoadBalancer Local", func(t *testing.T) {
		p := one(t, resolve(svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 32000
		})))
		if p.HealthCheckNodePort != 0 {
			t.Errorf("health check port %d on a NodePort Service, want 0", p.HealthCheckNodePort)
		}
	})
}

func TestNodePortAddresses(t *testing.T) {
	host := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	ifaces := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.1"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::1")}
	for _, tc := range []struct {
		flag, want string
		all        bool
	}{
		{"", "192.0.2.1 2001:db8::1", false}, // primary; IPv6 has no primary IP: all of it, as kube-proxy
		{"primary", "192.0.2.1 2001:db8::1", false},
		{"198.51.100.0/24", "198.51.100.1 2001:db8::1", false},
		{"198.51.100.0/24,2001:db8:ffff::/48", "198.51.100.1", false},
		{"0.0.0.0/0,::/0", "192.0.2.1 198.51.100.1 2001:db8::1", true},
	} {
		n, err := ParseNodePortAddresses(tc.flag)
		if err != nil {
			t.Fatal(err)
		}
		got, all := n.Resolve(host, ifaces)
		var ss []string
		for _, a := range got {
			ss = append(ss, a.String())
		}
		if strings.Join(ss, " ") != tc.want || all != tc.all {
			t.Errorf("--nodeport-addresses %q: %v (all %v), want %s (all %v)", tc.flag, ss, all, tc.want, tc.all)
		}
	}
	for _, bad := range []string{"primary,10.0.0.0/8", "10.0.0.300/8", "eth0"} {
		if _, err := ParseNodePortAddresses(bad); err == nil || !strings.Contains(err.Error(), "--nodeport-addresses") {
			t.Errorf("--nodeport-addresses %q: err %v, want one naming the flag", bad, err)
		}
	}
}
