//go:build kube

package overlay

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/test/kube"
)

// The Kubernetes backend against a real control plane (etcd,
// kube-apiserver, kube-controller-manager's node IPAM controller) started by
// test/kube/control-plane.sh in the test's private namespace. Run with
// `make test-kube` (the first build of the control plane takes minutes).

const annPrefix = "flannel.alpha.coreos.com/"

// startControlPlane runs the control plane on the test's loopback and
// proxies the API to the underlay, where the node namespaces reach it
// (env is added to control-plane.sh's environment, e.g. KCP_SERVICE_CIDR).
func (c *cluster) startControlPlane(env ...string) (kubernetes.Interface, string) {
	t := c.t
	args := c.kcpArgs
	if args == nil {
		args = []string{"10.244.0.0/16", "24"}
	}
	kubeconfig := kube.Start(t, env, args...)

	// The API listens on 127.0.0.1:16443 of this namespace; nodes reach it
	// at 192.168.77.254:16443 through this proxy.
	ln, err := net.Listen("tcp", "192.168.77.254:16443")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				up, err := net.Dial("tcp", "127.0.0.1:16443")
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, in)
				io.Copy(in, up)
			}()
		}
	}()
	b, err := os.ReadFile(kubeconfig)
	must(t, err)
	nodeCfg := filepath.Join(filepath.Dir(kubeconfig), "kubeconfig-nodes")
	must(t, os.WriteFile(nodeCfg, []byte(strings.ReplaceAll(string(b), "https://127.0.0.1:16443", "https://192.168.77.254:16443")), 0o600))
	return kube.Clientset(t, kubeconfig), nodeCfg
}

// startKubeOverlay starts the control plane (startControlPlane) for agents
// with the Kubernetes subnet manager on 10.244.0.0/16 with VXLAN: it writes
// their net-conf.json, reads the leases from the Nodes, and runs each agent
// with --kube-subnet-mgr, the nodes' kubeconfig, the net-conf and its node
// name (a test may change agentArgs before it starts the agents).
func (c *cluster) startKubeOverlay() (cs kubernetes.Interface, nodeCfg, netConf string) {
	t := c.t
	cs, nodeCfg = c.startControlPlane()
	netConf = filepath.Join(t.TempDir(), "net-conf.json")
	must(t, os.WriteFile(netConf, []byte(`{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`), 0o644))
	c.leaseSource = func() map[netip.Prefix]lease.Lease { return kubeLeases(t, cs) }
	c.agentArgs = func(n *node) []string {
		return []string{"--kube-subnet-mgr", "--kubeconfig-file", nodeCfg, "--net-config-path", netConf, "--node-name", n.name}
	}
	return cs, nodeCfg, netConf
}

// kubeLeases reads the leases the way an agent does: podCIDR plus flannel's
// annotations, of the nodes that run an overlay agent.
func kubeLeases(t *testing.T, cs kubernetes.Interface) map[netip.Prefix]lease.Lease {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	out := map[netip.Prefix]lease.Lease{}
	for _, n := range nodes.Items {
		if n.Annotations[annPrefix+"kube-subnet-manager"] != "true" || n.Spec.PodCIDR == "" {
			continue
		}
		sn := netip.MustParsePrefix(n.Spec.PodCIDR)
		l := lease.Lease{Subnet: sn}
		l.Attrs.PublicIP, err = netip.ParseAddr(n.Annotations[annPrefix+"public-ip"])
		must(t, err)
		l.Attrs.VNI, l.Attrs.VTEPMAC, err = lease.ParseVXLANData([]byte(n.Annotations[annPrefix+"backend-data"]))
		must(t, err)
		out[sn] = l
	}
	return out
}

func TestKubeCluster(t *testing.T) {
	c := newCluster(t, 3)
	cs, _, _ := c.startKubeOverlay()
	ctx := context.Background()
	for _, n := range c.nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{})
		must(t, err)
	}
	for _, n := range c.nodes {
		n.startAgent()
	}
	c.converge(c.nodes...)

	// The agents leased what the node IPAM controller assigned and
	// published flannel's annotations.
	for _, n := range c.nodes {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		must(t, err)
		s, _ := n.state()
		if node.Spec.PodCIDR != s.Lease.Subnet.String() {
			t.Errorf("%s: agent leased %s, node.spec.podCIDR is %s", n.name, s.Lease.Subnet, node.Spec.PodCIDR)
		}
		var bd lease.VXLANData
		must(t, json.Unmarshal([]byte(node.Annotations[annPrefix+"backend-data"]), &bd))
		if node.Annotations[annPrefix+"backend-type"] != "vxlan" || node.Annotations[annPrefix+"kube-subnet-manager"] != "true" ||
			node.Annotations[annPrefix+"public-ip"] != n.ip.String() || bd.VNI != 1 || bd.VtepMAC != s.Lease.VTEPMAC {
			t.Errorf("%s annotations = %v; want flannel's with public-ip %s and vtep %s", n.name, node.Annotations, n.ip, s.Lease.VTEPMAC)
		}
		// And cnibox's: the podCIDR and the label that let older peers
		// watch the metadata only (still published for them).
		if node.Annotations[annPrefix+"pod-cidrs"] != node.Spec.PodCIDR || node.Labels["cnibox.io/overlay-metadata"] != "true" {
			t.Errorf("%s: pod-cidrs annotation %q and label %q; want %s and true", n.name, node.Annotations[annPrefix+"pod-cidrs"], node.Labels["cnibox.io/overlay-metadata"], node.Spec.PodCIDR)
		}
	}

	var pods []*pod
	for _, n := range c.nodes {
		for _, name := range []string{"a", "b"} {
			p, err := n.addPod(name)
			if err != nil {
				t.Fatalf("ADD %s on %s: %v\nagent log:\n%s", name, n.name, err, n.log())
			}
			pods = append(pods, p)
		}
	}
	for _, from := range pods {
		for _, to := range pods {
			if from.node != to.node {
				if err := reachable(t, from, to); err != nil {
					t.Errorf("%s (%s) cannot reach %s (%s): %v", from.id, from.ip, to.id, to.ip, err)
				}
			}
		}
	}

	// A node leaves the cluster: the others drop it.
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	n3.stopAgent()
	must(t, cs.CoreV1().Nodes().Delete(ctx, n3.name, metav1.DeleteOptions{}))
	c.converge(n1, n2)

	// A restart keeps the podCIDR and the VTEP MAC.
	s2, _ := n2.state()
	n2.stopAgent()
	n2.startAgent()
	c.converge(n1, n2)
	r2, _ := n2.state()
	if r2.Lease.Subnet != s2.Lease.Subnet || r2.Lease.VTEPMAC != s2.Lease.VTEPMAC {
		t.Errorf("after a restart node2 has %s vtep %s; had %s vtep %s", r2.Lease.Subnet, r2.Lease.VTEPMAC, s2.Lease.Subnet, s2.Lease.VTEPMAC)
	}
	if err := reachable(t, pods[0], pods[2]); err != nil {
		t.Errorf("after node2's restart: %v", err)
	}
	for _, p := range pods[:4] {
		for range 2 {
			if err := p.node.delPod(p); err != nil {
				t.Errorf("DEL %s: %v", p.id, err)
			}
		}
	}
}
