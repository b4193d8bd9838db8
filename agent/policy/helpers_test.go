package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The test cluster is the upstream Netpol e2e's: namespaces x, y, z (label
// ns=<name>), pods a, b, c in each (label pod=<name>), serving 80 and 81 on
// TCP, UDP and SCTP with named ports serve-<port>-<proto>. Pods of x and y
// run on this node (n1), z's on n2. Pod b of every namespace also names
// port 8080/TCP "web"; pod a names 80/TCP "web".

const node = "n1"

var nsNames = []string{"x", "y", "z"}
var podNames = []string{"a", "b", "c"}

// ip is the address of pod ns/name: 10.<ns>.0.<pod>.
func ip(ns, name string) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(1 + strings.Index("xyz", ns)), 0, byte(1 + strings.Index("abc", name))})
}

// apiPod is the API object of ns/name as the test cluster has it.
func apiPod(ns, name string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pod": name}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip(ns, name).String()}}},
	}
	if ns == "z" {
		p.Spec.NodeName = "n2"
	}
	c := corev1.Container{Name: "c"}
	for _, port := range []int32{80, 81} {
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
			c.Ports = append(c.Ports, corev1.ContainerPort{
				Name: fmt.Sprintf("serve-%d-%s", port, strings.ToLower(string(proto))), ContainerPort: port, Protocol: proto,
			})
		}
	}
	web := int32(80)
	if name == "b" {
		web = 8080
	}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "web", ContainerPort: web})
	p.Spec.Containers = []corev1.Container{c}
	return p
}

// testCluster is the test cluster's input with the given policies.
func testCluster(nps []*networkingv1.NetworkPolicy, cnps []*cnpv1.ClusterNetworkPolicy) Input {
	in := Input{Node: node, NetworkPolicies: nps, ClusterNetworkPolicies: cnps}
	for _, ns := range nsNames {
		in.Namespaces = append(in.Namespaces, &Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
		for _, name := range podNames {
			in.Pods = append(in.Pods, PodFromAPI(apiPod(ns, name)))
		}
	}
	return in
}

// reach reports whether the model of node n1 lets src connect to dst: the
// egress verdict where src is local, the ingress verdict where dst is.
func reach(m *policymodel.Model, in Input, src, dst netip.Addr, proto policymodel.Protocol, port uint16) bool {
	c := policymodel.Conn{Src: src, Dst: dst, Proto: proto, Port: port}
	local := func(a netip.Addr) bool {
		for _, p := range in.Pods {
			if p.Node == node && len(p.IPs) > 0 && p.IPs[0] == a {
				return true
			}
		}
		return false
	}
	if local(src) && !m.Evaluate(policymodel.Egress, c).Allowed {
		return false
	}
	return !local(dst) || m.Evaluate(policymodel.Ingress, c).Allowed
}

// probe is one connection of a case and whether it must pass.
type probe struct {
	from, to string // "x/a", or an address
	proto    policymodel.Protocol
	port     uint16
	want     bool
}

func addr(t *testing.T, s string) netip.Addr {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return ip(ns, name)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// check runs probes against the model of in.
func check(t *testing.T, in Input, probes []probe) *policymodel.Model {
	t.Helper()
	m := Resolve(in)
	for _, p := range probes {
		proto := p.proto
		if proto == 0 {
			proto = policymodel.TCP
		}
		port := p.port
		if port == 0 {
			port = 80
		}
		if got := reach(m, in, addr(t, p.from), addr(t, p.to), proto, port); got != p.want {
			t.Errorf("%s -> %s %s/%d: reachable %v, want %v\n%s", p.from, p.to, proto, port, got, p.want, dump(m))
		}
	}
	return m
}

// dump is the model as text, sorted: what two models equal in.
func dump(m *policymodel.Model) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s\n", m.NodeAddrs)
	for _, d := range []policymodel.Direction{policymodel.Ingress, policymodel.Egress} {
		t := m.Tiers(d)
		fmt.Fprintf(&b, "%s isolated=%s\n", d, t.Isolated)
		for p := range t.Policies() {
			fmt.Fprintf(&b, " %s %s prio=%d subject=%s failClosed=%v\n", p.Tier, p.ID, p.Priority, p.Subject, p.FailClosed)
			for _, r := range p.Rules {
				fmt.Fprintf(&b, "  %s %q %s %+v\n", r.ID, r.Name, r.Action, r.Clauses)
			}
		}
	}
	ids := make([]string, 0, len(m.Sets))
	for id := range m.Sets {
		ids = append(ids, string(id))
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := m.Sets[policymodel.SetID(id)]
		fmt.Fprintf(&b, "set %s %q %v\n", id, s.Key, s.Elems())
	}
	keys := make([]string, 0, len(m.LocalPods))
	for k := range m.LocalPods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "local %s %v\n", k, m.LocalPods[k].IPs)
	}
	for _, i := range m.Issues {
		fmt.Fprintf(&b, "issue %v\n", i)
	}
	return b.String()
}

// np is a NetworkPolicy in ns named name.
func np(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func types(ts ...networkingv1.PolicyType) []networkingv1.PolicyType { return ts }

func port(proto corev1.Protocol, p any, end ...int32) networkingv1.NetworkPolicyPort {
	out := networkingv1.NetworkPolicyPort{}
	if proto != "" {
		out.Protocol = &proto
	}
	switch v := p.(type) {
	case int:
		ip := intstr.FromInt32(int32(v))
		out.Port = &ip
	case string:
		ip := intstr.FromString(v)
		out.Port = &ip
	}
	if len(end) > 0 {
		out.EndPort = &end[0]
	}
	return out
}

var (
	ingressOnly = types(networkingv1.PolicyTypeIngress)
	egressOnly  = types(networkingv1.PolicyTypeEgress)
)
