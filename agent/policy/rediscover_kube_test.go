//go:build kube

package policy

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/test/kube"
)

// TestWatchKubeCRDLater: with --cluster-network-policies and no
// ClusterNetworkPolicy CRD, NetworkPolicies are enforced; the CRD of
// network-policy-api v0.2.0 (v1alpha2 only) installed after the watcher
// started is picked up without a restart: an Admin ClusterNetworkPolicy
// then denies within the wait (the rediscovery's 10 s and a list); the CRD
// upgraded to v0.3.0 (v1beta1) is watched again and the policy still
// denies (issue 62, item 4: the agent kept watching v1beta1 and every
// ClusterNetworkPolicy went unenforced until a restart).
func TestWatchKubeCRDLater(t *testing.T) {
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	makeXY(ctx, t, cs)
	sink := &recSink{ch: make(chan struct{}, 1)}
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "n1"}, Syncer: sink, ClusterNetworkPolicies: true})
	}()
	sink.wait(t, "no CRD, no policy", "++")
	_, err := cs.NetworkingV1().NetworkPolicies("x").Create(ctx, np("x", "web", nv1.NetworkPolicySpec{
		PodSelector: *sel("pod", "a"),
		Ingress: []nv1.NetworkPolicyIngressRule{{
			From:  []nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("pod", "b")}},
			Ports: []nv1.NetworkPolicyPort{port("", "web")},
		}},
	}), metav1.CreateOptions{})
	must(t, err)
	sink.wait(t, "a NetworkPolicy enforced while the API serves no ClusterNetworkPolicy", "+-")

	// v0.2.0's CRD after the watcher started, and an Admin deny.
	doc, err := os.ReadFile("testdata/policy.networking.k8s.io_clusternetworkpolicies-v0.2.0.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, doc, "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies")
	c := cnp("deny-y", admin, 10, from(deny, "y"), nil)
	c.APIVersion, c.Kind = "policy.networking.k8s.io/v1alpha2", "ClusterNetworkPolicy"
	js, err := json.Marshal(c)
	must(t, err)
	must(t, cs.CoreV1().RESTClient().Post().AbsPath("/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies").
		Body(js).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	sink.wait(t, "the CRD installed after the watcher: its Admin deny enforced", "--")

	// Upgraded to v0.3.0: v1beta1 served (and stored), v1alpha2 still
	// served. The watcher watches v1beta1 from then on; the deny stays.
	up, err := os.ReadFile("testdata/policy.networking.k8s.io_clusternetworkpolicies-v0.3.0-experimental.yaml")
	must(t, err)
	body, err := yaml.YAMLToJSON(up)
	must(t, err)
	const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusternetworkpolicies.policy.networking.k8s.io"
	var have struct {
		Metadata struct{ ResourceVersion string }
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath(crdPath).DoRaw(ctx)
	must(t, err)
	must(t, json.Unmarshal(raw, &have))
	var crd map[string]any
	must(t, json.Unmarshal(body, &crd))
	crd["metadata"].(map[string]any)["resourceVersion"] = have.Metadata.ResourceVersion
	body, err = json.Marshal(crd)
	must(t, err)
	must(t, cs.CoreV1().RESTClient().Put().AbsPath(crdPath).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) { // served once established
		err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/policy.networking.k8s.io/v1beta1/clusternetworkpolicies").Do(ctx).Error()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("v1beta1 not served a minute after the CRD's upgrade: %v", err)
		}
	}
	must(t, cs.CoreV1().RESTClient().Delete().AbsPath("/apis/policy.networking.k8s.io/v1beta1/clusternetworkpolicies/deny-y").Do(ctx).Error())
	sink.wait(t, "the deny deleted through v1beta1", "+-")
	c.APIVersion = "policy.networking.k8s.io/v1beta1"
	js, err = json.Marshal(c)
	must(t, err)
	must(t, cs.CoreV1().RESTClient().Post().AbsPath("/apis/policy.networking.k8s.io/v1beta1/clusternetworkpolicies").
		Body(js).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	sink.wait(t, "a deny created through v1beta1 after the upgrade", "--")

	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Watch: %v", err)
	}
}
