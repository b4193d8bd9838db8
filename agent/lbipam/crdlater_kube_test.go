//go:build kube

package lbipam

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/test/kube"
)

// TestKubeCRDLater: the LoadBalancerIPPool CRD installed after the
// controller started, with its default wait (kubeapi.CRDPoll, 10 s): a
// pool made then gives a LoadBalancer Service an address within 30 s of
// the CRD, no restart. Run with -tags kube, as root, under flock
// /tmp/cnibox-kube.lock.
func TestKubeCRDLater(t *testing.T) {
	kc := kube.Start(t, []string{"KCP_SERVICE_CIDR=10.96.0.0/16,fd00:96::/112"})
	cs := kube.Clientset(t, kc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		err := Run(ctx, Config{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "n1"}, Every: 200 * time.Millisecond,
			ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	_, err := cs.CoreV1().Services("default").Create(ctx, lbService("late", 80), metav1.CreateOptions{})
	must(t, err)
	crd, err := os.ReadFile("../../deploy/kubernetes/loadbalancerippool-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/loadbalancerippools")
	must(t, createPool(cs, "late", `{"blocks":[{"start":"192.0.2.200","stop":"192.0.2.209"}]}`))
	ingress(t, cs, "late", some) // within 30 s
}
