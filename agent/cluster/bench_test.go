package cluster

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchPod is pod i of a cluster of 100 namespaces, 500 ReplicaSets and
// 5,000 nodes: its labels are its ReplicaSet's, it has one address and one
// named port, and the metadata a kubelet leaves.
func benchPod(i int) *corev1.Pod {
	ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%100), Name: fmt.Sprintf("web-h%d-%d", i%500, i), ResourceVersion: fmt.Sprint(100000 + i),
			Labels:        map[string]string{"app": fmt.Sprintf("app-%d", i%500), "pod-template-hash": fmt.Sprintf("h%d", i%500)},
			Annotations:   map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-27T00:00:00Z"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%5000), Containers: []corev1.Container{{Name: "c", Image: "x",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// BenchmarkPodMemory: the heap the cache's slim form of 50,000 such pods
// holds, in bytes a pod (the objects, not the informer's index). Before
// the cache, with NetworkPolicy, MultiNetworkPolicy and egress gateways
// on, each reader's informer held its own form of every pod: 265 + 479 +
// 1,742 = 2,486 B a pod by the same measure (docs/benchmarks.md).
func BenchmarkPodMemory(b *testing.B) {
	const n = 50000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		held := make([]any, n)
		for i := range n {
			held[i], _ = slim(benchPod(i), keep{node: "node-0"})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/pod")
		runtime.KeepAlive(held)
	}
}
