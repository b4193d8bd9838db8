//go:build kube

package overlay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// flannelNode is a Node as a node that runs flanneld looks: kubelet's
// labels, status (conditions, 25 images) and flannel's annotations with a
// podCIDR out of 10.244.128.0/17 (the node IPAM controller hands the real
// nodes theirs from the bottom of 10.244.0.0/16).
func flannelNode(i int, mac string) *corev1.Node {
	name := fmt.Sprintf("flannel-%04d", i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
			},
			Annotations: map[string]string{
				annPrefix + "backend-type":        "vxlan",
				annPrefix + "backend-data":        fmt.Sprintf(`{"VNI":1,"VtepMAC":%q}`, mac),
				annPrefix + "kube-subnet-manager": "true",
				annPrefix + "public-ip":           fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250),
				"node.alpha.kubernetes.io/ttl":    "0",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.%d/27", 128+i/8, 32*(i%8))},
	}
}

// nodeStatus is a kubelet's status report.
func nodeStatus(n *corev1.Node, beat time.Time) {
	t := metav1.NewTime(beat)
	n.Status.Conditions = nil
	for _, c := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"} {
		st := corev1.ConditionFalse
		if c == "Ready" {
			st = corev1.ConditionTrue
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: st, LastHeartbeatTime: t, LastTransitionTime: t, Reason: "Kubelet" + string(c), Message: "kubelet reports " + string(c)})
	}
	n.Status.Images = nil
	for j := range 25 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example/team/image-%02d@sha256:%064x", j, j), fmt.Sprintf("registry.example/team/image-%02d:v1.%d", j, j)},
			SizeBytes: int64(10_000_000 + j),
		})
	}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Allocatable = n.Status.Capacity
	n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.34.2", OSImage: "Debian GNU/Linux 13", ContainerRuntimeVersion: "containerd://2.1.0", KernelVersion: "6.12.0", OperatingSystem: "linux", Architecture: "amd64"}
}

// createFlannelNodes creates nodes [from, to) with their status, 8 at a time.
func createFlannelNodes(t *testing.T, cs kubernetes.Interface, from, to int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, to-from)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				n, err := cs.CoreV1().Nodes().Create(ctx, flannelNode(i, fmt.Sprintf("0a:58:0a:%02x:%02x:01", i/256, i%256)), metav1.CreateOptions{})
				if err == nil {
					nodeStatus(n, time.Now())
					_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create flannel nodes: %v", err)
	}
}

// TestKubeMixedFlannel: cnibox agents in a cluster whose other nodes run
// flanneld. The agents list more Nodes than one page holds (the informer
// lists 500 at a time), program every flannel node that has its
// annotations, skip nodes that run no overlay agent, follow a flannel node
// whose VTEP changes, are not moved by a status report, and drop a deleted
// flannel node, and follow one that turns into a cnibox node.
func TestKubeMixedFlannel(t *testing.T) {
	const flannels = 620
	c := newCluster(t, 2)
	cs, _, _ := c.startKubeOverlay()
	ctx := context.Background()
	t0 := time.Now()
	createFlannelNodes(t, cs, 0, flannels)
	t.Logf("%d flannel nodes created in %s", flannels, time.Since(t0))
	// A node with a podCIDR and no overlay agent (no kube-subnet-manager).
	plain := flannelNode(flannels, "0a:58:0a:ff:ff:01")
	plain.Name, plain.Annotations = "plain", nil
	_, err := cs.CoreV1().Nodes().Create(ctx, plain, metav1.CreateOptions{})
	must(t, err)
	for _, n := range c.nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{})
		must(t, err)
	}
	for _, n := range c.nodes {
		n.startAgent()
	}
	c.converge(c.nodes...)
	t.Logf("converged %s after the creation", time.Since(t0))
	if got := len(kubeLeases(t, cs)); got != flannels+len(c.nodes) {
		t.Fatalf("%d leases in the cluster, want %d", got, flannels+len(c.nodes))
	}

	// flanneld restarted on flannel-0007 with a new VTEP MAC.
	n7, err := cs.CoreV1().Nodes().Get(ctx, "flannel-0007", metav1.GetOptions{})
	must(t, err)
	n7.Annotations[annPrefix+"backend-data"] = `{"VNI":1,"VtepMAC":"0a:58:0a:77:77:77"}`
	_, err = cs.CoreV1().Nodes().Update(ctx, n7, metav1.UpdateOptions{})
	must(t, err)
	c.converge(c.nodes...)
	mac, _ := net.ParseMAC("0a:58:0a:77:77:77")
	for _, n := range c.nodes {
		k, err := n.kernel()
		must(t, err)
		if nb := k.neighs[netip.MustParseAddr("10.244.128.224")]; nb.MAC.String() != mac.String() {
			t.Errorf("%s: neighbour of flannel-0007 is %v, want lladdr %s", n.name, nb, mac)
		}
	}

	// A status report of a flannel node and a new node with no overlay
	// agent change nothing.
	n8, err := cs.CoreV1().Nodes().Get(ctx, "flannel-0008", metav1.GetOptions{})
	must(t, err)
	nodeStatus(n8, time.Now().Add(time.Minute))
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n8, metav1.UpdateOptions{})
	must(t, err)
	c.converge(c.nodes...)

	// flannel-0009 leaves the cluster.
	must(t, cs.CoreV1().Nodes().Delete(ctx, "flannel-0009", metav1.DeleteOptions{}))
	c.converge(c.nodes...)
	for _, n := range c.nodes {
		k, err := n.kernel()
		must(t, err)
		if r, ok := k.routes[netip.MustParsePrefix("10.244.129.32/27")]; ok {
			t.Errorf("%s still routes the deleted flannel-0009: %v", n.name, r)
		}
	}

	// flannel-0010 turns into a cnibox node: the pod CIDRs annotation and
	// the label (which moved it to another watch in the agents before the
	// informer cache); its peer stays, and a new VTEP arrives.
	n10, err := cs.CoreV1().Nodes().Get(ctx, "flannel-0010", metav1.GetOptions{})
	must(t, err)
	n10.Labels["cnibox.io/overlay-metadata"] = "true"
	n10.Annotations[annPrefix+"pod-cidrs"] = n10.Spec.PodCIDR
	n10, err = cs.CoreV1().Nodes().Update(ctx, n10, metav1.UpdateOptions{})
	must(t, err)
	c.converge(c.nodes...)
	n10.Annotations[annPrefix+"backend-data"] = `{"VNI":1,"VtepMAC":"0a:58:0a:10:10:10"}`
	_, err = cs.CoreV1().Nodes().Update(ctx, n10, metav1.UpdateOptions{})
	must(t, err)
	c.converge(c.nodes...)
}
