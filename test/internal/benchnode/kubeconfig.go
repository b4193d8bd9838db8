package benchnode

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// APIClients are a bench's ways to the control plane that
// test/kube/control-plane.sh started in kcp: a client for the bench
// itself (QPS and burst qps: it creates thousands of objects), and the
// path of a kubeconfig, written as out, whose server is the API server's
// port on gw, the underlay's address the nodes' namespaces reach.
func APIClients(kcp, out, apiPort string, gw netip.Addr, qps int) (*kubernetes.Clientset, error) {
	cfg := filepath.Join(kcp, "kubeconfig")
	rc, err := clientcmd.BuildConfigFromFlags("", cfg)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = float32(qps), qps
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	kc, err := os.ReadFile(cfg)
	if err != nil {
		return nil, err
	}
	nodeKC := strings.ReplaceAll(string(kc), "127.0.0.1:"+apiPort, gw.String()+":"+apiPort)
	return cs, os.WriteFile(out, []byte(nodeKC), 0o600)
}
