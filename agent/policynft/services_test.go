package policynft_test

import (
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// NetworkPolicy with the Services table (issue 63): the lab's node runs the
// services table (table inet cnibox-services, its DNAT at prerouting
// dstnat) beside the policy table (forward and input, priority -1), as
// cnibox-agent --service-proxy does, and a client off the cluster reaches
// the node's NodePorts through a link of its own (vout).

// The lab's Services: svcCIP4/svcCIP6 port svcPort (TCP and UDP) to the
// backend's port 80; NodePort svcNodePort to the same. whoCIP4/6 port 80
// and NodePort whoNodePort to the backend's "who" server (nstest.Serve:
// it answers with the client address it sees).
var (
	svcCIP4, svcCIP6       = netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd96::10")
	whoCIP4, whoCIP6       = netip.MustParseAddr("10.96.0.11"), netip.MustParseAddr("fd96::11")
	outNode4, outNode6     = netip.MustParseAddr("192.168.99.1"), netip.MustParseAddr("fd00:98::1")
	outClient4, outClient6 = netip.MustParseAddr("192.168.99.2"), netip.MustParseAddr("fd00:98::2")
	serviceCIDRs           = []string{"10.96.0.0/16", "fd96::/112"}
)

const (
	svcPort     = 8080
	svcNodePort = 30080
	whoNodePort = 30081
)

// svcLab is a lab whose node serves Services whose one backend is a pod of
// the lab, and a client off the cluster (outside).
type svcLab struct {
	*lab
	n        *node
	backend  *labPod
	outside  *labPod // not a pod: a host routed to the node by vout
	who4     netip.AddrPort
	who6     netip.AddrPort
	services *nft.Services
	snap     *svcmodel.Snapshot
}

// newSvcLab makes the lab of pods, the Services to backend (a pod of
// them), the client outside and the policy node (not started).
func newSvcLab(t *testing.T, backend string, pods ...string) *svcLab {
	l := newLab(t, pods...)
	s := &svcLab{lab: l, backend: l.pod(backend)}
	must(t, l.node.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv6.conf.all.forwarding", Value: "1"}))
	out, outPath := openNS(t, "po")
	_, _, err := l.node.EnsureVeth(netops.VethOpts{HostName: "vout", PeerName: "eth0", Peer: out})
	must(t, err)
	must(t, l.node.EnsureAddr("vout", netip.PrefixFrom(outNode4, 24), netops.AddrOpts{}))
	must(t, l.node.EnsureAddr("vout", netip.PrefixFrom(outNode6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, out.EnsureAddr("eth0", netip.PrefixFrom(outClient4, 24), netops.AddrOpts{}))
	must(t, out.EnsureAddr("eth0", netip.PrefixFrom(outClient6, 64), netops.AddrOpts{NoDAD: true}))
	must(t, out.EnsureRoute(netops.Route{GW: outNode4, Dev: "eth0"}))
	must(t, out.EnsureRoute(netops.Route{GW: outNode6, Dev: "eth0"}))
	s.outside = &labPod{ns: "outside", name: "client", path: outPath, ip: outClient4, ip6: outClient6}
	s.who4 = nstest.Serve(t, s.backend.path, s.backend.ip)
	s.who6 = nstest.Serve(t, s.backend.path, s.backend.ip6)
	s.snap = s.snapshot()
	h, err := nft.Open(l.nodePath)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	s.services = nft.NewServices(h, nft.ServicesOptions{})
	must(t, s.services.Apply(s.snap))
	t.Cleanup(func() { s.services.Delete() })
	s.n = newNode(t, l)
	return s
}

// snapshot is the lab's Services, as the agent's watcher resolves them.
func (s *svcLab) snapshot() *svcmodel.Snapshot {
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{outNode4, outNode6},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("fd00:99::/64")},
	}
	for _, f := range []struct {
		fam      svcmodel.Family
		cip, who netip.Addr
		be       netip.Addr
		whoPort  uint16
	}{{svcmodel.IPv4, svcCIP4, whoCIP4, s.backend.ip, s.who4.Port()}, {svcmodel.IPv6, svcCIP6, whoCIP6, s.backend.ip6, s.who6.Port()}} {
		ep := func(port uint16) []svcmodel.Endpoint {
			return []svcmodel.Endpoint{{Addr: f.be, Port: port, Ready: true, Serving: true, Local: true}}
		}
		for _, proto := range []svcmodel.Proto{svcmodel.TCP, svcmodel.UDP} {
			snap.Ports = append(snap.Ports, svcmodel.ServicePort{
				Name: svcmodel.PortName{Namespace: s.backend.ns, Name: "web", Port: string(proto)}, Family: f.fam, Protocol: proto,
				Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: f.cip, Family: f.fam, Port: svcPort},
					{Kind: svcmodel.NodePort, Family: f.fam, Port: svcNodePort}},
				ClusterEndpoints: ep(80), LocalEndpoints: ep(80), HasEndpoints: true})
		}
		snap.Ports = append(snap.Ports, svcmodel.ServicePort{
			Name: svcmodel.PortName{Namespace: s.backend.ns, Name: "who"}, Family: f.fam, Protocol: svcmodel.TCP,
			Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: f.who, Family: f.fam, Port: 80},
				{Kind: svcmodel.NodePort, Family: f.fam, Port: whoNodePort}},
			ClusterEndpoints: ep(f.whoPort), LocalEndpoints: ep(f.whoPort), HasEndpoints: true})
	}
	return snap
}

// setPolicies replaces the NetworkPolicies of the node with nps.
func (s *svcLab) setPolicies(t *testing.T, prev *[]*networkingv1.NetworkPolicy, nps ...*networkingv1.NetworkPolicy) {
	t.Helper()
	s.n.t = t
	for _, p := range *prev {
		s.n.do(func(e *policy.Engine) policymodel.Delta { return e.DeleteNetworkPolicy(p.Namespace, p.Name) })
	}
	for _, p := range nps {
		s.n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(p) })
	}
	*prev = nps
}

func fam(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

func pick[T any](v6 bool, a, b T) T {
	if v6 {
		return b
	}
	return a
}

// TestServicesPolicyAfterDNAT: a policy judges a connection to a Service
// by its backend, as the backend sees it (docs/policy.md, "Services"):
// an egress policy of the client judges the backend's address and port
// (after the DNAT), not the ClusterIP's: allowing the Service range by an
// ipBlock does not let the client reach a backend its policy does not
// allow, and allowing the backend pod's port admits the ClusterIP's port
// that leads there; an ingress policy of the backend judges the client
// pod itself (not masqueraded). Both families, TCP and UDP.
func TestServicesPolicyAfterDNAT(t *testing.T) {
	t.Parallel()
	s := newSvcLab(t, "x/b", "x/a", "x/b", "y/a")
	s.n.start()
	xa, ya := s.pod("x/a"), s.pod("y/a")
	var prev []*networkingv1.NetworkPolicy
	serviceRange := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: serviceCIDRs[0]}}, {IPBlock: &networkingv1.IPBlock{CIDR: serviceCIDRs[1]}}}
	cases := []struct {
		name string
		nps  []*networkingv1.NetworkPolicy
		// from x/a and from y/a, through the ClusterIP (port svcPort)
		xa, ya bool
	}{
		{name: "no policy", xa: true, ya: true},
		{name: "x/a egress to the Service range only: the backend is not in it", nps: []*networkingv1.NetworkPolicy{
			np("x", "to-range", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: serviceRange}}})}, xa: false, ya: true},
		{name: "x/a egress to app=b port 80 only: the backend's port, not the ClusterIP's 8080", nps: []*networkingv1.NetworkPolicy{
			np("x", "to-b", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "b")}},
					Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80), port(udp, 80)}}}})}, xa: true, ya: true},
		{name: "x/a egress to port 8080 of everything: the ClusterIP's port is no backend's", nps: []*networkingv1.NetworkPolicy{
			np("x", "to-8080", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "a"), PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{port(tcp, svcPort), port(udp, svcPort)}}}})}, xa: false, ya: true},
		{name: "x/b ingress from app=a of x only: the client pod is judged", nps: []*networkingv1.NetworkPolicy{
			np("x", "from-a", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "a")}}}}})}, xa: true, ya: false},
		{name: "x/b ingress from the Service range only: no client is the ClusterIP", nps: []*networkingv1.NetworkPolicy{
			np("x", "from-range", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: serviceRange}}})}, xa: false, ya: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.setPolicies(t, &prev, c.nps...)
			for _, v6 := range []bool{false, true} {
				for _, proto := range []policymodel.Protocol{policymodel.TCP, policymodel.UDP} {
					for _, from := range []struct {
						p    *labPod
						want bool
					}{{xa, c.xa}, {ya, c.ya}} {
						to := pick(v6, svcCIP4, svcCIP6)
						if got := connect(t, from.p, to, proto, svcPort, waitFor(from.want)); got != from.want {
							t.Errorf("%s/%s -> %s %s/%d (%s): connected %v, want %v", from.p.ns, from.p.name, to, proto, svcPort, fam(v6), got, from.want)
						}
					}
				}
			}
		})
	}
	// The backend sees the client pod's own address through the
	// ClusterIP (kube-proxy masquerades no pod of the cluster there): the
	// address its ingress policy judged.
	s.setPolicies(t, &prev)
	for _, v6 := range []bool{false, true} {
		to := netip.AddrPortFrom(pick(v6, whoCIP4, whoCIP6), 80)
		if got, want := nstest.SeenFrom(t, xa.path, to), pick(v6, xa.ip, xa.ip6); got != want {
			t.Errorf("x/a through %v seen from %v, want its own %v", to, got, want)
		}
	}
}

// TestServicesPolicyNodePort: a client off the cluster reaches a NodePort
// of a Service whose backend is on this node; the services table
// masquerades it (externalTrafficPolicy Cluster, as kube-proxy does), so
// the backend sees the node's address. The backend's ingress policy
// judges the client as the packet reached the node, before the
// masquerade: its own address. Above all the masqueraded connection is
// not the node's own traffic, which policies let through (kubelet
// probes): a deny-all ingress policy refuses it, and one that allows only
// the node's address does too. Both families.
func TestServicesPolicyNodePort(t *testing.T) {
	t.Parallel()
	s := newSvcLab(t, "x/b", "x/b")
	s.n.start()
	var prev []*networkingv1.NetworkPolicy
	// Seen through the masquerade: the bridge's address (the way to the
	// backend).
	for _, v6 := range []bool{false, true} {
		to := netip.AddrPortFrom(pick(v6, outNode4, outNode6), whoNodePort)
		if got, want := nstest.SeenFrom(t, s.outside.path, to), pick(v6, nodeAddr, nodeAddr6); got != want {
			t.Errorf("NodePort %v from off the cluster seen from %v, want the node's %v (masqueraded)", to, got, want)
		}
	}
	ipBlock := func(cidr string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}
	}
	cases := []struct {
		name string
		nps  []*networkingv1.NetworkPolicy
		want bool
	}{
		{name: "deny-all ingress on the backend", nps: []*networkingv1.NetworkPolicy{
			np("x", "deny", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), PolicyTypes: ingress})}},
		{name: "ingress from the node's addresses only", nps: []*networkingv1.NetworkPolicy{
			np("x", "node", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					ipBlock(nodeAddr.String() + "/32"), ipBlock(nodeAddr6.String() + "/128"),
					ipBlock(outNode4.String() + "/32"), ipBlock(outNode6.String() + "/128")}}}})}},
		{name: "ingress from the client's network", nps: []*networkingv1.NetworkPolicy{
			np("x", "client", networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "b"), PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					ipBlock("192.168.99.0/24"), ipBlock("fd00:98::/64")}}}})}, want: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.setPolicies(t, &prev, c.nps...)
			for _, v6 := range []bool{false, true} {
				for _, proto := range []policymodel.Protocol{policymodel.TCP, policymodel.UDP} {
					to := pick(v6, outNode4, outNode6)
					if got := connect(t, s.outside, to, proto, svcNodePort, waitFor(c.want)); got != c.want {
						t.Errorf("off the cluster -> NodePort %s %s/%d: connected %v, want %v", to, proto, svcNodePort, got, c.want)
					}
				}
			}
		})
	}
}
