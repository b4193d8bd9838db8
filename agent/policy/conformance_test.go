package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"text/template"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The network-policy-api v0.2.0 conformance suite's own manifests
// (testdata/conformance, from the module's conformance/base): its houses
// (namespaces), their StatefulSets' pods (two each, all on this node), and
// the policies of a test; the probes are its tests' PokeServer calls.

// load reads the documents of a manifest into in.
func load(t *testing.T, in *Input, file string) {
	t.Helper()
	tmpl, err := template.ParseFiles("testdata/conformance/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder // manifests.yaml is a template of the host-network pods' ports
	if err := tmpl.Execute(&b, map[string][]int{"HostNetworkPorts": {34345, 34346, 34347, 34348, 34349, 34350, 34351, 34352}}); err != nil {
		t.Fatal(err)
	}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(b.String(), -1) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Namespace":
			var ns corev1.Namespace
			decode(t, doc, &ns)
			// the API server's own label of every namespace
			metav1.SetMetaDataLabel(&ns.ObjectMeta, corev1.LabelMetadataName, ns.Name)
			in.Namespaces = append(in.Namespaces, NamespaceFromAPI(&ns))
		case "StatefulSet":
			var ss appsv1.StatefulSet
			decode(t, doc, &ss)
			for i := int32(0); i < *ss.Spec.Replicas; i++ {
				p := &corev1.Pod{ObjectMeta: ss.Spec.Template.ObjectMeta, Spec: ss.Spec.Template.Spec}
				p.Namespace, p.Name, p.Spec.NodeName = ss.Namespace, fmt.Sprintf("%s-%d", ss.Name, i), node
				a := netip.AddrFrom4([4]byte{10, 0, byte(len(in.Pods)), 1})
				if p.Spec.HostNetwork {
					a = netip.MustParseAddr("192.168.0.1") // the node's
				}
				p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: a.String()}}}
				in.Pods = append(in.Pods, PodFromAPI(p))
			}
		case "NetworkPolicy":
			var np nv1.NetworkPolicy
			decode(t, doc, &np)
			in.NetworkPolicies = append(in.NetworkPolicies, &np)
		case "ClusterNetworkPolicy":
			var c cnpv1.ClusterNetworkPolicy
			decode(t, doc, &c)
			in.ClusterNetworkPolicies = append(in.ClusterNetworkPolicies, &c)
		}
	}
}

func decode(t *testing.T, doc string, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatal(err)
	}
}

// poke is one PokeServer: client pod, server pod, protocol, port, whether
// it must connect.
type poke struct {
	client, server string
	proto          policymodel.Protocol
	port           uint16
	want           bool
}

// pokes checks the pokes against the model of in; pods are named
// "<house>/<pod>" (house: the namespace without its prefix).
func pokes(t *testing.T, in Input, ps []poke) {
	t.Helper()
	m := Resolve(in)
	addrOf := func(s string) netip.Addr {
		for _, p := range in.Pods {
			if "network-policy-conformance-"+s == p.Key() {
				return p.IPs[0]
			}
		}
		t.Fatalf("no pod %s", s)
		return netip.Addr{}
	}
	for _, p := range ps {
		if got := reach(m, in, addrOf(p.client), addrOf(p.server), p.proto, p.port); got != p.want {
			t.Errorf("%s -> %s %s/%d: %v, want %v", p.client, p.server, p.proto, p.port, got, p.want)
		}
	}
}

func cnpNamed(in Input, name string) *cnpv1.ClusterNetworkPolicy {
	for _, c := range in.ClusterNetworkPolicies {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// TestConformanceIntegration is the suite's
// admin-network-policy-standard-integration: Admin, NetworkPolicy and
// Baseline with Pass.
func TestConformanceIntegration(t *testing.T) {
	var in Input
	in.Node = node
	load(t, &in, "manifests.yaml")
	load(t, &in, "standard-anp-np-banp.yaml")
	intoG := []poke{{"slytherin/draco-malfoy-0", "gryffindor/harry-potter-0", policymodel.TCP, 80, false}, {"slytherin/draco-malfoy-1", "gryffindor/harry-potter-0", policymodel.TCP, 8080, false}}
	fromG := []poke{{"gryffindor/harry-potter-0", "slytherin/draco-malfoy-0", policymodel.TCP, 80, false}, {"gryffindor/harry-potter-1", "slytherin/draco-malfoy-0", policymodel.TCP, 8080, false}}
	flip := func(ps []poke, want bool) []poke {
		out := append([]poke(nil), ps...)
		for i := range out {
			out[i].want = want
		}
		return out
	}
	t.Run("admin deny", func(t *testing.T) { pokes(t, in, append(intoG, fromG...)) })
	pass := cnpNamed(in, "pass-example")
	pass.Spec.Ingress[0].Action = cnpv1.ClusterNetworkPolicyRuleActionPass
	pass.Spec.Egress[0].Action = cnpv1.ClusterNetworkPolicyRuleActionPass
	t.Run("pass to the NetworkPolicy", func(t *testing.T) { pokes(t, in, flip(append(intoG, fromG...), true)) })
	in.NetworkPolicies = nil
	t.Run("pass to the baseline", func(t *testing.T) { pokes(t, in, append(intoG, fromG...)) })
}

// TestConformancePriority is the suite's
// admin-network-policy-standard-priority.
func TestConformancePriority(t *testing.T) {
	var in Input
	in.Node = node
	load(t, &in, "manifests.yaml")
	load(t, &in, "standard-priority-field.yaml")
	ps := []poke{
		{"slytherin/draco-malfoy-0", "gryffindor/harry-potter-0", policymodel.TCP, 80, false}, {"slytherin/draco-malfoy-1", "gryffindor/harry-potter-0", policymodel.TCP, 8080, false},
		{"gryffindor/harry-potter-0", "slytherin/draco-malfoy-0", policymodel.TCP, 80, false}, {"gryffindor/harry-potter-1", "slytherin/draco-malfoy-0", policymodel.TCP, 8080, false},
	}
	t.Run("deny at 50 before pass at 60", func(t *testing.T) { pokes(t, in, ps) })
	cnpNamed(in, "old-priority-60-new-priority-40-example").Spec.Priority = 40
	for i := range ps {
		ps[i].want = true
	}
	t.Run("pass at 40 to the baseline's accept", func(t *testing.T) { pokes(t, in, ps) })
}

// TestConformanceIngressSCTP is the suite's
// admin-network-policy-standard-ingress-sctp (CNPAdminTierIngressSCTP),
// its patches applied in its order: make test-cnp cannot run it on a
// kernel without SCTP sockets.
func TestConformanceIngressSCTP(t *testing.T) {
	var in Input
	in.Node = node
	load(t, &in, "manifests.yaml")
	load(t, &in, "standard-ingress-sctp-rules.yaml")
	cnp := cnpNamed(in, "ingress-sctp")
	swap := func(i, j int) { r := cnp.Spec.Ingress; r[i], r[j] = r[j], r[i] }
	const l0, l1 = "ravenclaw/luna-lovegood-0", "ravenclaw/luna-lovegood-1"
	t.Run("allow, rule order", func(t *testing.T) {
		pokes(t, in, []poke{{"gryffindor/harry-potter-0", l0, policymodel.SCTP, 9003, true}, {"gryffindor/harry-potter-1", l0, policymodel.SCTP, 9005, true}})
	})
	t.Run("allow at the port", func(t *testing.T) {
		pokes(t, in, []poke{{"hufflepuff/cedric-diggory-0", l1, policymodel.SCTP, 9003, true}, {"hufflepuff/cedric-diggory-1", l1, policymodel.SCTP, 9005, false}})
	})
	swap(0, 1)
	t.Run("deny, rule order", func(t *testing.T) {
		pokes(t, in, []poke{{"gryffindor/harry-potter-0", l1, policymodel.SCTP, 9003, false}, {"gryffindor/harry-potter-1", l1, policymodel.SCTP, 9005, false}})
	})
	t.Run("deny at the port", func(t *testing.T) {
		pokes(t, in, []poke{{"slytherin/draco-malfoy-0", l0, policymodel.SCTP, 9003, false}, {"slytherin/draco-malfoy-1", l0, policymodel.SCTP, 9005, true}})
	})
	swap(0, 2)
	t.Run("pass, rule order", func(t *testing.T) {
		pokes(t, in, []poke{{"gryffindor/harry-potter-0", l1, policymodel.SCTP, 9003, true}, {"gryffindor/harry-potter-1", l1, policymodel.SCTP, 9005, true}})
	})
	swap(3, 4)
	t.Run("pass at the port", func(t *testing.T) {
		pokes(t, in, []poke{{"slytherin/draco-malfoy-0", l0, policymodel.SCTP, 9003, true}, {"slytherin/draco-malfoy-1", l0, policymodel.SCTP, 9005, true}})
	})
}

// TestConformanceEgressSCTP is the suite's
// admin-network-policy-standard-egress-sctp (CNPAdminTierEgressSCTP), as
// TestConformanceIngressSCTP.
func TestConformanceEgressSCTP(t *testing.T) {
	var in Input
	in.Node = node
	load(t, &in, "manifests.yaml")
	load(t, &in, "standard-egress-sctp-rules.yaml")
	cnp := cnpNamed(in, "egress-sctp")
	swap := func(i, j int) { r := cnp.Spec.Egress; r[i], r[j] = r[j], r[i] }
	const l0, l1 = "ravenclaw/luna-lovegood-0", "ravenclaw/luna-lovegood-1"
	const h0, h1 = "gryffindor/harry-potter-0", "gryffindor/harry-potter-1"
	const c1, d0 = "hufflepuff/cedric-diggory-1", "slytherin/draco-malfoy-0"
	t.Run("allow, rule order", func(t *testing.T) {
		pokes(t, in, []poke{{l0, h0, policymodel.SCTP, 9003, true}, {l1, h0, policymodel.SCTP, 9005, true}})
	})
	t.Run("allow at the port", func(t *testing.T) {
		pokes(t, in, []poke{{l0, c1, policymodel.SCTP, 9003, true}, {l1, c1, policymodel.SCTP, 9005, false}})
	})
	swap(0, 1)
	t.Run("deny, rule order", func(t *testing.T) {
		pokes(t, in, []poke{{l0, h1, policymodel.SCTP, 9003, false}, {l1, h1, policymodel.SCTP, 9005, false}})
	})
	t.Run("deny at the port", func(t *testing.T) {
		pokes(t, in, []poke{{l0, d0, policymodel.SCTP, 9003, false}, {l1, d0, policymodel.SCTP, 9005, true}})
	})
	swap(0, 2)
	t.Run("pass, rule order", func(t *testing.T) {
		pokes(t, in, []poke{{l0, h1, policymodel.SCTP, 9003, true}, {l1, h1, policymodel.SCTP, 9005, true}})
	})
	swap(3, 4)
	t.Run("pass at the port", func(t *testing.T) {
		pokes(t, in, []poke{{l0, d0, policymodel.SCTP, 9003, true}, {l1, d0, policymodel.SCTP, 9005, true}})
	})
}
