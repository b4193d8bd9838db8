package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// oracle decides a connection between two pods of the test cluster from the
// NetworkPolicy objects themselves, as the API's documentation reads, with
// none of the engine's code: the reference TestOracle holds the model to.
type oracle struct {
	nps  []*nv1.NetworkPolicy
	pods map[netip.Addr]*corev1.Pod
}

func selects(ls *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(ls)
	return err == nil && s.Matches(labels.Set(l))
}

// types is the policy's directions with the API's default.
func (o *oracle) types(np *nv1.NetworkPolicy) (in, eg bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		in = in || t == nv1.PolicyTypeIngress
		eg = eg || t == nv1.PolicyTypeEgress
	}
	return in, eg
}

func (o *oracle) peerOK(np *nv1.NetworkPolicy, peers []nv1.NetworkPolicyPeer, a netip.Addr) bool {
	if len(peers) == 0 {
		return true
	}
	p := o.pods[a]
	for _, pe := range peers {
		if pe.IPBlock != nil {
			cidr := netip.MustParsePrefix(pe.IPBlock.CIDR)
			ok := cidr.Contains(a)
			for _, e := range pe.IPBlock.Except {
				ok = ok && !netip.MustParsePrefix(e).Contains(a)
			}
			if ok {
				return true
			}
			continue
		}
		if p == nil {
			continue
		}
		nsOK := p.Namespace == np.Namespace
		if pe.NamespaceSelector != nil {
			nsOK = selects(pe.NamespaceSelector, map[string]string{"ns": p.Namespace})
		}
		if nsOK && (pe.PodSelector == nil || selects(pe.PodSelector, p.Labels)) {
			return true
		}
	}
	return false
}

func (o *oracle) portOK(ports []nv1.NetworkPolicyPort, dst netip.Addr, proto corev1.Protocol, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.Int:
			end := p.Port.IntVal
			if p.EndPort != nil {
				end = *p.EndPort
			}
			if port >= p.Port.IntVal && port <= end {
				return true
			}
		case o.pods[dst] != nil:
			for _, cp := range o.pods[dst].Spec.Containers[0].Ports {
				cpp := cp.Protocol
				if cpp == "" {
					cpp = corev1.ProtocolTCP // the API's default
				}
				if cp.Name == p.Port.StrVal && cpp == proto && cp.ContainerPort == port {
					return true
				}
			}
		}
	}
	return false
}

// allowed decides src -> dst in direction dir, at the pod that dir's
// policies select (dst for ingress, src for egress).
func (o *oracle) allowed(egress bool, src, dst netip.Addr, proto corev1.Protocol, port int32) bool {
	self := o.pods[dst]
	if egress {
		self = o.pods[src]
	}
	isolated := false
	for _, np := range o.nps {
		in, eg := o.types(np)
		if np.Namespace != self.Namespace || !selects(&np.Spec.PodSelector, self.Labels) || (egress && !eg) || (!egress && !in) {
			continue
		}
		isolated = true
		if egress {
			for _, r := range np.Spec.Egress {
				if o.peerOK(np, r.To, dst) && o.portOK(r.Ports, dst, proto, port) {
					return true
				}
			}
			continue
		}
		for _, r := range np.Spec.Ingress {
			if o.peerOK(np, r.From, src) && o.portOK(r.Ports, dst, proto, port) {
				return true
			}
		}
	}
	return !isolated
}

// randomNP is a NetworkPolicy of the shapes the API allows.
func randomNP(rng *rand.Rand, i int) *nv1.NetworkPolicy {
	pick := func(n int) int { return rng.IntN(n) }
	selectors := []*metav1.LabelSelector{{}, sel("pod", "a"), sel("pod", "b"),
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pod", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "c"}}}}}
	nsSelectors := []*metav1.LabelSelector{{}, sel("ns", "y"), sel("ns", "z"),
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ns", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}}}}}
	protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	peers := func() []nv1.NetworkPolicyPeer {
		var out []nv1.NetworkPolicyPeer
		for n := pick(3); n > 0; n-- {
			switch pick(4) {
			case 0:
				out = append(out, nv1.NetworkPolicyPeer{PodSelector: selectors[pick(4)]})
			case 1:
				out = append(out, nv1.NetworkPolicyPeer{NamespaceSelector: nsSelectors[pick(4)]})
			case 2:
				out = append(out, nv1.NetworkPolicyPeer{NamespaceSelector: nsSelectors[pick(4)], PodSelector: selectors[pick(4)]})
			default:
				out = append(out, nv1.NetworkPolicyPeer{IPBlock: &nv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{fmt.Sprintf("10.%d.0.0/16", 1+pick(3))}}})
			}
		}
		return out
	}
	ports := func() []nv1.NetworkPolicyPort {
		var out []nv1.NetworkPolicyPort
		for n := pick(3); n > 0; n-- {
			proto := protos[pick(3)]
			switch pick(4) {
			case 0:
				out = append(out, port(proto, 80+pick(2)))
			case 1:
				out = append(out, port(proto, 79, 80))
			case 2:
				out = append(out, port(proto, nil))
			default:
				out = append(out, port(proto, []string{"web", "serve-81-udp", "serve-80-sctp"}[pick(3)]))
			}
		}
		return out
	}
	spec := nv1.NetworkPolicySpec{PodSelector: *selectors[pick(4)]}
	spec.PolicyTypes = [][]nv1.PolicyType{nil, ingressOnly, egressOnly, types(nv1.PolicyTypeIngress, nv1.PolicyTypeEgress)}[pick(4)]
	for n := pick(3); n > 0; n-- {
		spec.Ingress = append(spec.Ingress, nv1.NetworkPolicyIngressRule{From: peers(), Ports: ports()})
	}
	for n := pick(3); n > 0; n-- {
		spec.Egress = append(spec.Egress, nv1.NetworkPolicyEgressRule{To: peers(), Ports: ports()})
	}
	return np(nsNames[pick(3)], fmt.Sprint("p", i), spec)
}

// TestOracle: for random sets of NetworkPolicies, the model decides every
// connection between the test cluster's pods (TCP, UDP, SCTP; ports 79-81,
// 8080) as the oracle does.
func TestOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	o := &oracle{pods: map[netip.Addr]*corev1.Pod{}}
	for _, ns := range nsNames {
		for _, name := range podNames {
			o.pods[ip(ns, name)] = apiPod(ns, name)
		}
	}
	protos := map[policymodel.Protocol]corev1.Protocol{policymodel.TCP: corev1.ProtocolTCP, policymodel.UDP: corev1.ProtocolUDP, policymodel.SCTP: corev1.ProtocolSCTP}
	checked := 0
	for round := 0; round < 200; round++ {
		o.nps = nil
		for n := 1 + rng.IntN(4); n > 0; n-- {
			o.nps = append(o.nps, randomNP(rng, n))
		}
		in := testCluster(o.nps, nil)
		m := Resolve(in)
		for src, sp := range o.pods {
			for dst, dp := range o.pods {
				for proto, cp := range protos {
					for _, port := range []uint16{79, 80, 81, 8080} {
						want := true
						if sp.Spec.NodeName == node {
							want = o.allowed(true, src, dst, cp, int32(port))
						}
						if dp.Spec.NodeName == node {
							want = want && o.allowed(false, src, dst, cp, int32(port))
						}
						if got := reach(m, in, src, dst, proto, port); got != want {
							t.Fatalf("round %d: %s/%s -> %s/%s %s/%d: model %v, oracle %v\npolicies %+v\n%s",
								round, sp.Namespace, sp.Name, dp.Namespace, dp.Name, proto, port, got, want, o.nps, dump(m))
						}
						checked++
					}
				}
			}
		}
	}
	t.Logf("%d connections checked", checked)
}
