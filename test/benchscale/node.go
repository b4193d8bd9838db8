package main

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var conditionTypes = []corev1.NodeConditionType{"NetworkUnavailable", "MemoryPressure", "DiskPressure", "PIDPressure", "Ready"}

// flannelPeers makes the simulated nodes flanneld's (-peers flannel).
var flannelPeers bool

// simNode is a Node as a kubelet and flanneld (or cnibox-agent) leave it: kubelet's labels
// and status (5 conditions, addresses, capacity, node info, 25 images of two
// names each), flannel's annotations and the podCIDR.
func simNode(p peer, now time.Time) *corev1.Node {
	t := metav1.NewTime(now)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.name,
			Labels: map[string]string{
				"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": p.name, "kubernetes.io/os": "linux",
				"node.kubernetes.io/instance-type": "m6i.2xlarge", "topology.kubernetes.io/region": "eu-west-1",
				"topology.kubernetes.io/zone": "eu-west-1a",
			},
			Annotations: map[string]string{
				annPrefix + "backend-data":                               fmt.Sprintf(`{"VNI":1,"VtepMAC":"%s"}`, p.mac),
				annPrefix + "backend-type":                               "vxlan",
				annPrefix + "kube-subnet-manager":                        "true",
				annPrefix + "public-ip":                                  p.ip.String(),
				"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///run/containerd/containerd.sock",
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: p.subnet.String(), PodCIDRs: []string{p.subnet.String()}},
	}
	if !flannelPeers {
		// As cnibox-agent publishes it: the podCIDRs in an annotation too,
		// and the label that lets peers watch the metadata only.
		n.Labels["cnibox.io/overlay-metadata"] = "true"
		n.Annotations[annPrefix+"pod-cidrs"] = p.subnet.String()
	}
	for _, c := range conditionTypes {
		st := corev1.ConditionFalse
		if c == "Ready" {
			st = corev1.ConditionTrue
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: c, Status: st, LastHeartbeatTime: t, LastTransitionTime: t,
			Reason: "Kubelet" + string(c), Message: "kubelet reports " + string(c),
		})
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: p.ip.String()}, {Type: corev1.NodeHostName, Address: p.name}}
	rl := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32318024Ki"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("101430960Ki"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
	}
	n.Status.Capacity, n.Status.Allocatable = rl, rl
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		MachineID: fmt.Sprintf("%032x", p.mac), SystemUUID: fmt.Sprintf("ec2%029x", p.mac), BootID: fmt.Sprintf("%032x", p.ip.AsSlice()),
		KernelVersion: "6.12.48+deb13-amd64", OSImage: "Debian GNU/Linux 13 (trixie)", ContainerRuntimeVersion: "containerd://2.1.4",
		KubeletVersion: "v1.34.2", OperatingSystem: "linux", Architecture: "amd64",
	}
	for j := range 25 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names: []string{
				fmt.Sprintf("registry.k8s.io/team/component-%02d@sha256:%064x", j, 0xabcdef+j),
				fmt.Sprintf("registry.k8s.io/team/component-%02d:v1.%d.%d", j, j, 3),
			},
			SizeBytes: int64(12_000_000 + 997*j),
		})
	}
	return n
}
