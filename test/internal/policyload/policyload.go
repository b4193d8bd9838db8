// Package policyload is the workload the NetworkPolicy benches write into a
// real API server (make bench-policy, and make bench-scale with -pods):
// pods' labels and NetworkPolicies that select them, the same shape at
// every size, and a parallel runner for creating them.
package policyload

import (
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NamespaceLabels of namespace i: team t0..t3 (the policies' namespace
// selectors).
func NamespaceLabels(i int) map[string]string {
	return map[string]string{"team": fmt.Sprintf("t%d", i%4)}
}

// PodLabels of the j-th pod, which lives in namespace j % namespaces: app
// a0..a9 (the policies' subjects; every app of every namespace has pods
// when there are 100 pods or more a namespace), tier t0..t2 (their
// ingress peers).
func PodLabels(j, namespaces int) map[string]string {
	k := j / namespaces
	return map[string]string{"app": fmt.Sprintf("a%d", k%10), "tier": fmt.Sprintf("t%d", (k/10)%3)}
}

// Policy is the k-th NetworkPolicy, which lives in namespace
// k % namespaces: its pods app=a((k/namespaces)%10) take TCP 8000+k%1000
// from the namespace's pods tier=t(k%3) and from namespaces team=t(k%4),
// and send TCP 9000+k%1000 to namespaces team=t(k%4). Both directions
// isolate.
func Policy(name string, k, namespaces int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	in, out := intstr.FromInt32(int32(8000+k%1000)), intstr.FromInt32(int32(9000+k%1000))
	team := &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", k%4)}}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", (k/namespaces)%10)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": fmt.Sprintf("t%d", k%3)}}},
					{NamespaceSelector: team},
				},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &in}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: team}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &out}},
			}},
		},
	}
}

// Pod is a pod of the workload on node, not yet running: one container
// naming port 8080 "web", no service account token.
func Pod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "c", Image: "bench",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}}}},
	}
}

// Running turns p Running with ip, as a kubelet's status update does.
func Running(p *corev1.Pod, ip, hostIP string) {
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	p.Status.HostIP = hostIP
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
}

// Parallel runs fn(0..n-1) on w workers; the first error wins.
func Parallel(w, n int, fn func(int) error) error {
	var (
		wg   sync.WaitGroup
		once sync.Once
		ferr error
		next atomic.Int64
	)
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { ferr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return ferr
}
