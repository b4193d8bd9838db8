//go:build kube

package overlay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/netops"
)

// TestKubeNodeDefaults is flannel's node defaults against a real control
// plane, with the agents run as kube-flannel.yml runs flanneld:
// node1's agent has no --node-name, only POD_NAME/POD_NAMESPACE of a pod
// bound to node1, kube-flannel's --ip-masq --kube-subnet-mgr
// --healthz-port, and its node was marked NetworkUnavailable=True (as a
// cloud's node controller does): the agent sets it False (FlannelIsUp).
// node2's agent turns that off through FLANNELD_SET_NODE_NETWORK_UNAVAILABLE
// and its node carries flannel's node-public-ip annotation, an address of
// its own that the agent publishes instead of its interface's.
func TestKubeNodeDefaults(t *testing.T) {
	c := newCluster(t, 2)
	cs, nodeCfg, netConf := c.startKubeOverlay()
	n1, n2 := c.nodes[0], c.nodes[1]
	c.agentArgs = func(n *node) []string {
		args := []string{"--kube-subnet-mgr", "--kubeconfig-file", nodeCfg, "--net-config-path", netConf}
		if n == n1 {
			return append(args, "--healthz-ip", n1.ip.String(), "--healthz-port=18081")
		}
		return append(args, "--node-name", n.name)
	}
	ctx := context.Background()
	unavailable := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue,
		Reason: "NoRouteCreated", Message: "Node created without a route", LastTransitionTime: metav1.Now()}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: metav1.Now()}
	n2public := netip.MustParseAddr("192.168.77.112")
	for _, n := range c.nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		if n == n2 {
			node.Annotations = map[string]string{annPrefix + "node-public-ip": n2public.String()}
		}
		created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		must(t, err)
		created.Status.Conditions = []corev1.NodeCondition{unavailable, ready}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		must(t, err)
	}
	// kube-flannel's DaemonSet pod on node1, as the downward API names it.
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel"}}, metav1.CreateOptions{})
	must(t, err)
	// The control plane runs no service account controller: the pod's
	// account is made by hand.
	_, err = cs.CoreV1().ServiceAccounts("kube-flannel").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "flannel"}}, metav1.CreateOptions{})
	must(t, err)
	no := false
	_, err = cs.CoreV1().Pods("kube-flannel").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-ds-abcde", Namespace: "kube-flannel"},
		Spec: corev1.PodSpec{NodeName: n1.name, ServiceAccountName: "flannel", AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "kube-flannel", Image: "cnibox"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	n1.env = []string{"NODE_NAME=", "POD_NAME=kube-flannel-ds-abcde", "POD_NAMESPACE=kube-flannel", "EVENT_QUEUE_DEPTH=5000", "CONT_WHEN_CACHE_NOT_READY=false"}
	n2.env = []string{"NODE_NAME=", "FLANNELD_SET_NODE_NETWORK_UNAVAILABLE=false"}
	// node2's public address is a second address of its interface.
	must(t, openH(t, n2.ns).EnsureAddr("eth0", netip.PrefixFrom(n2public, 24), netops.AddrOpts{NoDAD: true}))

	for _, n := range c.nodes {
		n.startAgent()
	}
	c.converge(c.nodes...)

	condition := func(name string) corev1.NodeCondition {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		for _, cd := range node.Status.Conditions {
			if cd.Type == corev1.NodeNetworkUnavailable {
				return cd
			}
		}
		return corev1.NodeCondition{}
	}
	waitUntil(t, "node1 NetworkUnavailable=False", func() (bool, string) {
		cd := condition(n1.name)
		return cd.Status == corev1.ConditionFalse && cd.Reason == "FlannelIsUp", fmt.Sprintf("%+v\nagent log:\n%s", cd, n1.log())
	})
	node1, err := cs.CoreV1().Nodes().Get(ctx, n1.name, metav1.GetOptions{})
	must(t, err)
	if len(node1.Status.Conditions) != 2 {
		t.Errorf("node1 conditions %+v; want the kubelet's Ready kept beside NetworkUnavailable", node1.Status.Conditions)
	}
	if cd := condition(n2.name); cd.Status != corev1.ConditionTrue {
		t.Errorf("node2 (FLANNELD_SET_NODE_NETWORK_UNAVAILABLE=false) NetworkUnavailable = %+v; want it left True", cd)
	}

	// node2 publishes the annotated address; node1 sends to it.
	node2, err := cs.CoreV1().Nodes().Get(ctx, n2.name, metav1.GetOptions{})
	must(t, err)
	if got := node2.Annotations[annPrefix+"public-ip"]; got != n2public.String() {
		t.Errorf("node2 public-ip annotation %q; want %s from node-public-ip", got, n2public)
	}
	p1, err := n1.addPod("a")
	must(t, err)
	p2, err := n2.addPod("a")
	must(t, err)
	for _, pair := range [][2]*pod{{p1, p2}, {p2, p1}} {
		if err := reachable(t, pair[0], pair[1]); err != nil {
			t.Errorf("%v", err)
		}
	}

	// kube-flannel's probes: /healthz and /readyz on --healthz-port.
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := hc.Get(fmt.Sprintf("http://%s:18081%s", n1.ip, path))
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
	}
}
