//go:build kube

package policy

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/test/kube"
)

// recSink records, at each delta, whether y/b may reach x/a on 80 and 81,
// then whether x/a may reach the node address infraIP on 22 (its egress),
// and whether the delta rewrote rules.
type recSink struct {
	mu    sync.Mutex
	state string
	rules bool
	calls int
	ch    chan struct{}
}

func (s *recSink) Apply(m *policymodel.Model, d policymodel.Delta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := policymodel.Conn{Src: netip.MustParseAddr("10.2.0.2"), Dst: netip.MustParseAddr("10.1.0.1"), Proto: policymodel.TCP}
	s.state = ""
	for _, port := range []uint16{80, 81} {
		c.Port = port
		if m.Evaluate(policymodel.Ingress, c).Allowed {
			s.state += "+"
		} else {
			s.state += "-"
		}
	}
	if m.Evaluate(policymodel.Egress, policymodel.Conn{Src: c.Dst, Dst: infraIP, Proto: policymodel.TCP, Port: 22}).Allowed {
		s.state += "+"
	} else {
		s.state += "-"
	}
	s.rules = d.Rules
	s.calls++
	select {
	case s.ch <- struct{}{}:
	default:
	}
	return nil
}

// infraIP is the address of the node infra-1 that TestWatchKube makes.
var infraIP = netip.MustParseAddr("172.31.250.9")

// wait waits until the recorded state is want (two signs: y/b -> x/a on
// 80 and 81 only; three: and x/a -> infraIP).
func (s *recSink) wait(t *testing.T, what, want string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.mu.Lock()
		got := s.state[:min(len(s.state), len(want))]
		s.mu.Unlock()
		if got == want {
			return
		}
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("%s: y/b -> x/a on 80, 81 (then x/a -> %s on 22): %q, want %q", what, infraIP, got, want)
		}
	}
}

// TestWatchKube: the watcher against a real API server (test/kube's
// control plane) with the CRD of ClusterNetworkPolicy of network-policy-api
// v0.2.0 (v1alpha2 alone) and of v0.3.0 (v1beta1 stored, v1alpha2 served
// too): the first delta once synced, then each change of a policy, a pod's
// labels and a ClusterNetworkPolicy of the newest version served reaching
// the model, its Event naming that version. Run with -tags kube under
// flock /tmp/cnibox-kube.lock.
func TestWatchKube(t *testing.T) {
	for _, c := range []struct{ crd, version string }{{"v0.2.0", "v1alpha2"}, {"v0.3.0-experimental", "v1beta1"}} {
		t.Run(c.crd, func(t *testing.T) { watchKube(t, c.crd, c.version) })
	}
}

// watchKube is TestWatchKube with the CRD of testdata named crd (a release
// and channel of network-policy-api) serving version; the `nodes` peer's
// steps run where the CRD has the field (the experimental channel).
func watchKube(t *testing.T, crd, version string) {
	cs, kc := kube.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The ClusterNetworkPolicy CRD of testdata.
	doc, err := os.ReadFile("testdata/policy.networking.k8s.io_clusternetworkpolicies-" + crd + ".yaml")
	must(t, err)
	cnpPath := "/apis/policy.networking.k8s.io/" + version + "/clusternetworkpolicies"
	kube.CreateCRD(t, cs, doc, cnpPath)

	makeXY(ctx, t, cs)

	sink := &recSink{ch: make(chan struct{}, 1)}
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Cluster: kubeapi.Cluster{Kubeconfig: kc, NodeName: "n1"}, Syncer: sink, ClusterNetworkPolicies: true})
	}()
	sink.wait(t, "no policy", "++")

	_, err = cs.NetworkingV1().NetworkPolicies("x").Create(ctx, np("x", "web", nv1.NetworkPolicySpec{
		PodSelector: *sel("pod", "a"),
		Ingress: []nv1.NetworkPolicyIngressRule{{
			From:  []nv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("pod", "b")}},
			Ports: []nv1.NetworkPolicyPort{port("", "web")},
		}},
	}), metav1.CreateOptions{})
	must(t, err)
	sink.wait(t, "the NetworkPolicy allows the named port web (80)", "+-")

	b, err := cs.CoreV1().Pods("y").Get(ctx, "b", metav1.GetOptions{})
	must(t, err)
	b.Labels["pod"] = "c"
	b, err = cs.CoreV1().Pods("y").Update(ctx, b, metav1.UpdateOptions{})
	must(t, err)
	sink.wait(t, "y/b relabelled out of the peer", "--")
	sink.mu.Lock()
	if sink.rules {
		t.Errorf("a pod's relabel rewrote the rules")
	}
	sink.mu.Unlock()

	b.Labels["pod"] = "b"
	_, err = cs.CoreV1().Pods("y").Update(ctx, b, metav1.UpdateOptions{})
	must(t, err)
	sink.wait(t, "y/b back", "+-")

	// A `nodes` peer: x/a's egress to the nodes labelled role=infra is
	// denied; infra-1 relabelled a worker, it is open again.
	if strings.HasSuffix(crd, "-experimental") {
		watchNodesPeer(ctx, t, cs, sink, cnpPath, version)
	}

	c := cnp("deny-y", admin, 10, from(deny, "y"), nil)
	c.APIVersion, c.Kind = "policy.networking.k8s.io/"+version, "ClusterNetworkPolicy"
	js, err := json.Marshal(c)
	must(t, err)
	must(t, cs.CoreV1().RESTClient().Post().AbsPath(cnpPath).
		Body(js).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	sink.wait(t, "the Admin ClusterNetworkPolicy denies y", "--")

	must(t, cs.CoreV1().RESTClient().Delete().AbsPath(cnpPath+"/deny-y").Do(ctx).Error())
	sink.wait(t, "the ClusterNetworkPolicy deleted", "+-")

	// The CRD does not check a selector's operator: the engine cannot
	// read the subject, so the policy takes every pod and only denies, and
	// an Event on it names the field.
	bad := cnp("bad", admin, 10, from(accept, ""), nil)
	bad.APIVersion, bad.Kind = "policy.networking.k8s.io/"+version, "ClusterNetworkPolicy"
	bad.Spec.Subject.Namespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ns", Operator: "Near", Values: []string{"x"}}}}
	js, err = json.Marshal(bad)
	must(t, err)
	must(t, cs.CoreV1().RESTClient().Post().AbsPath(cnpPath).
		Body(js).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	sink.wait(t, "a ClusterNetworkPolicy the engine cannot read fails closed", "--")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad,reason=" + eventReason})
		must(t, err)
		if len(evs.Items) == 1 && strings.Contains(evs.Items[0].Message, "spec.subject.namespaces") && evs.Items[0].Type == corev1.EventTypeWarning &&
			evs.Items[0].InvolvedObject.APIVersion == "policy.networking.k8s.io/"+version {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events on the policy: %+v, want one Warning naming spec.subject.namespaces, on the %s object", evs.Items, version)
		}
	}
	must(t, cs.CoreV1().RESTClient().Delete().AbsPath(cnpPath+"/bad").Do(ctx).Error())
	sink.wait(t, "the bad ClusterNetworkPolicy deleted", "+-")
	// A pod deleted leaves the peer sets (the informer's delete of a slim
	// pod names it).
	zero := int64(0)
	must(t, cs.CoreV1().Pods("y").Delete(ctx, "b", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	sink.wait(t, "y/b deleted", "--")
	must(t, cs.NetworkingV1().NetworkPolicies("x").Delete(ctx, "web", metav1.DeleteOptions{}))
	sink.wait(t, "the NetworkPolicy deleted", "++")

	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Watch: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// watchNodesPeer: a ClusterNetworkPolicy with a `nodes` peer denies x/a
// the address of node infra-1 while its labels say role=infra; the node
// relabelled, the address is open (the watcher's node informer).
func watchNodesPeer(ctx context.Context, t *testing.T, cs kubernetes.Interface, sink *recSink, cnpPath, version string) {
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "infra-1", Labels: map[string]string{"role": "infra"}}}, metav1.CreateOptions{})
	must(t, err)
	// Patches: the node controllers change the object meanwhile.
	_, err = cs.CoreV1().Nodes().Patch(ctx, "infra-1", ktypes.MergePatchType,
		[]byte(`{"status":{"addresses":[{"type":"InternalIP","address":"`+infraIP.String()+`"},{"type":"Hostname","address":"infra-1"}]}}`),
		metav1.PatchOptions{}, "status")
	must(t, err)
	nodes := cnp("no-infra", admin, 20, nil, []cnpv1.ClusterNetworkPolicyEgressRule{{Action: deny,
		To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Nodes: sel("role", "infra")}}}})
	nodes.APIVersion, nodes.Kind = "policy.networking.k8s.io/"+version, "ClusterNetworkPolicy"
	js, err := json.Marshal(nodes)
	must(t, err)
	must(t, cs.CoreV1().RESTClient().Post().AbsPath(cnpPath).Body(js).SetHeader("Content-Type", "application/json").Do(ctx).Error())
	sink.wait(t, "x/a denied the infra nodes", "+--")
	_, err = cs.CoreV1().Nodes().Patch(ctx, "infra-1", ktypes.MergePatchType, []byte(`{"metadata":{"labels":{"role":"worker"}}}`), metav1.PatchOptions{})
	must(t, err)
	sink.wait(t, "infra-1 relabelled a worker", "+-+")
	must(t, cs.CoreV1().RESTClient().Delete().AbsPath(cnpPath+"/no-infra").Do(ctx).Error())
	sink.wait(t, "the nodes ClusterNetworkPolicy deleted", "+-+")
}

// makeXY makes the namespaces x and y (labelled ns=<name>) and their pods
// x/a on n1 (10.1.0.1) and y/b on n2 (10.2.0.2), running, each with the
// container port web (80).
func makeXY(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	for _, ns := range []string{"x", "y"} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"ns": ns}}}, metav1.CreateOptions{})
		must(t, err)
		_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		must(t, err)
	}
	no := false
	for _, p := range []struct{ ns, name, node, ip string }{{"x", "a", "n1", "10.1.0.1"}, {"y", "b", "n2", "10.2.0.2"}} {
		pod, err := cs.CoreV1().Pods(p.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns, Labels: map[string]string{"pod": p.name}},
			Spec: corev1.PodSpec{NodeName: p.node, AutomountServiceAccountToken: &no, Containers: []corev1.Container{{
				Name: "c", Image: "none", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 80}},
			}}},
		}, metav1.CreateOptions{})
		must(t, err)
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP, pod.Status.PodIPs = p.ip, []corev1.PodIP{{IP: p.ip}}
		_, err = cs.CoreV1().Pods(p.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		must(t, err)
	}

}
