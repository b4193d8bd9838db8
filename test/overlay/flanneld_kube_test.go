//go:build kube

package overlay

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/lease"
)

// TestKubeFlanneld: the same on the Kubernetes backend (kube-subnet-mgr,
// the node annotations), on a real control plane.
func TestKubeFlanneld(t *testing.T) {
	for _, be := range compatBackends {
		t.Run(be.name, func(t *testing.T) {
			kernelHas(t, be.name, be.need)
			bin := flanneldPath(t)
			c := newCluster(t, 2)
			cs, nodeCfg := c.startControlPlane()
			c.flannelConf()
			netConf := filepath.Join(t.TempDir(), "net-conf.json")
			must(t, os.WriteFile(netConf, []byte(`{"Network": "10.244.0.0/16", "Backend": `+be.backend+`}`), 0o644))
			c.leaseSource = func() map[netip.Prefix]lease.Lease { return kubeLeases(t, cs) }
			ctx := context.Background()
			for _, n := range c.nodes {
				// As a kubelet registers it (flanneld's kube subnet manager
				// writes into the annotations map).
				_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name,
					Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}}}, metav1.CreateOptions{})
				must(t, err)
			}
			n1, n2 := c.nodes[0], c.nodes[1]
			n1.env = []string{"WIREGUARD_KEY_FILE=" + filepath.Join(n1.dataDir, "wgkey")}
			kube := []string{"--kube-subnet-mgr", "--kubeconfig-file=" + nodeCfg, "--net-config-path=" + netConf}
			c.agentArgs = func(n *node) []string { return append(kube, "--node-name", n.name) }
			n1.startAgent()
			n2.startFlanneld(t, bin, kube...)
			n1.waitSubnetFile(t)
			n2.waitSubnetFile(t)
			compat(t, c, be.name, func() {
				must(t, cs.CoreV1().Nodes().Delete(ctx, n2.name, metav1.DeleteOptions{}))
			})
		})
	}
}
