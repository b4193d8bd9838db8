//go:build kube

package egress

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/test/kube"
)

// warnings records the API server's warnings.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.got = append(w.got, text)
	w.mu.Unlock()
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}

// TestKubeEgressScopeWarning: an EgressGateway without namespaceSelector
// (any tenant's pod opts into its address with a label: issue 60, finding
// 8) is created with a warning naming the field and the fix, from the
// manifest's policy cnibox-egressgateway-scope; one with namespaceSelector
// {} (every namespace, on purpose) or with labels draws none.
func TestKubeEgressScopeWarning(t *testing.T) {
	kc := kube.Start(t, nil)
	cs := kube.Clientset(t, kc)
	ctx := context.Background()
	crd, err := os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/egressgateways")
	b, err := os.ReadFile("../../deploy/kubernetes/cnibox.yaml")
	must(t, err)
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct {
			Kind     string
			Metadata metav1.ObjectMeta
		}
		if yaml.Unmarshal(doc, &meta) != nil || meta.Metadata.Name != "cnibox-egressgateway-scope" {
			continue
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			var p admv1.ValidatingAdmissionPolicy
			must(t, yaml.UnmarshalStrict(doc, &p))
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{})
			must(t, err)
		case "ValidatingAdmissionPolicyBinding":
			var p admv1.ValidatingAdmissionPolicyBinding
			must(t, yaml.UnmarshalStrict(doc, &p))
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &p, metav1.CreateOptions{})
			must(t, err)
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	must(t, err)
	w := &warnings{}
	rc.WarningHandler = w
	wcs, err := kubernetes.NewForConfig(rc)
	must(t, err)
	gw := func(name, spec string) error {
		return createGateway(wcs, `{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"`+name+`"},"spec":`+spec+`}`)
	}
	del := func(name string) {
		wcs.CoreV1().RESTClient().Delete().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/" + name).Do(ctx)
	}
	// The policy takes a moment to be in force.
	var got []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		must(t, gw("open", `{"egressIPs":["192.0.2.10"],"podSelector":{"matchLabels":{"app":"x"}}}`))
		got = w.take()
		del("open")
		if len(got) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "spec.namespaceSelector is absent") || !strings.Contains(got[0], "namespaceSelector: {}") {
		t.Errorf("a gateway without namespaceSelector: warnings %q, want one naming the field and the fix", got)
	}
	for _, spec := range []string{
		`{"egressIPs":["192.0.2.11"],"namespaceSelector":{}}`,
		`{"egressIPs":["192.0.2.12"],"namespaceSelector":{"matchLabels":{"team":"a"}}}`,
	} {
		must(t, gw("scoped", spec))
		if got := w.take(); len(got) != 0 {
			t.Errorf("gateway %s: warnings %q, want none", spec, got)
		}
		del("scoped")
	}
}
