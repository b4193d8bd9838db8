package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibox/cnibox/test/internal/netload"
	"github.com/cnibox/cnibox/test/internal/policyload"
)

// addPolicies creates -policies NetworkPolicies selecting the pods and
// waits until both nodes' tables hold them (cnibox's policy table, or
// kube-router's chains), unchanged for 2 s.
func (in *instance) addPolicies() error {
	e := in.e
	n := e.o.policies
	if err := policyload.Parallel(8, n, func(k int) error {
		_, err := e.cs.NetworkingV1().NetworkPolicies(in.kubeNS).Create(e.ctx, dpPolicy(k, n), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	chains := policyChains
	if in.c.kubeRouter {
		chains = kubeRouterChains
	}
	for _, nd := range in.nodes {
		last, since := -1, time.Now()
		err := e.waitFor(fmt.Sprintf("%d policies on %s", n, nd.name), e.o.timeout, func() (bool, error) {
			k, err := chains(nd.Path)
			if err != nil {
				return false, err
			}
			if k != last {
				last, since = k, time.Now()
			}
			return k >= n && time.Since(since) >= 2*time.Second, nil
		})
		if err != nil {
			tail := nd.agent
			if nd.policyAgent != nil {
				tail = nd.policyAgent
			}
			return fmt.Errorf("%w\n%s", err, tail.LogTail(2000))
		}
	}
	in.logf("%d policies in both nodes' tables", n)
	return nil
}

// checkPolicies: a port no policy allows is closed from pod a to pod c,
// and (cnibox) the flow log of a's node records it.
func (in *instance) checkPolicies(a string, c netip.Addr) error {
	if err := in.reach(a, c, loadPort); err != nil {
		return err
	}
	if conn, err := netload.DialFrom(a, netip.AddrPortFrom(c, closedPort), time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("the policies are not in force: port %d, which none allows, is open from pod a to pod c", closedPort)
	}
	if in.c.kind != cniboxKind {
		return nil
	}
	return in.e.waitFor("the flow log's record of the refused connection", 10*time.Second, func() (bool, error) {
		b, err := os.ReadFile(flowLog(in.nodes[0]))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return len(bytes.TrimSpace(b)) > 0, err
	})
}

// dpPolicy k of n: every one selects the pods (app=dp), both directions.
// The first n-1 allow TCP 10000+k from pods app=x(k) and to
// 192.0.2.(k%256)/32, which no packet of the bench matches; the last
// allows what the bench sends between the pods (iperf3's TCP and UDP,
// netload's port).
func dpPolicy(k, n int) *networkingv1.NetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := intstr.FromInt32(int32(10000 + k))
	ports := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}
	in := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("x%d", k)}}}}
	out := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("192.0.2.%d/32", k%256)}}}
	if k == n-1 {
		iperf, load := intstr.FromInt32(iperfPort), intstr.FromInt32(loadPort)
		ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &iperf}, {Protocol: &udp, Port: &iperf}, {Protocol: &tcp, Port: &load}}
		dp := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dp"}}}}
		in, out = dp, dp
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dp%03d", k)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "dp"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: in, Ports: ports}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: out, Ports: ports}},
		},
	}
}
