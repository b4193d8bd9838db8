//go:build !nokube

package policy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/kubecore"
)

// TestStagedDecode: the staged policies' client decodes a list of each kind
// from the API's JSON into the kinds' types, spec included, and a deep copy
// shares nothing with the original.
func TestStagedDecode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/cnibox.io/v1alpha1/namespaces/x/stagednetworkpolicies":
			w.Write([]byte(`{"kind":"StagedNetworkPolicyList","apiVersion":"cnibox.io/v1alpha1","metadata":{"resourceVersion":"7"},
				"items":[{"metadata":{"name":"only-web","namespace":"x"},"spec":{"podSelector":{"matchLabels":{"app":"web"}},"policyTypes":["Ingress"]}}]}`))
		case "/apis/cnibox.io/v1alpha1/stagedclusternetworkpolicies":
			w.Write([]byte(`{"kind":"StagedClusterNetworkPolicyList","apiVersion":"cnibox.io/v1alpha1","metadata":{},
				"items":[{"metadata":{"name":"dns"},"spec":{"tier":"Admin","priority":5,"subject":{"namespaces":{}}}}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := kubecore.GroupClient(&rest.Config{Host: srv.URL}, StagedGroupVersion(), "/apis", &StagedNetworkPolicy{}, &StagedNetworkPolicyList{},
		&StagedClusterNetworkPolicy{}, &StagedClusterNetworkPolicyList{})
	if err != nil {
		t.Fatal(err)
	}
	var nps StagedNetworkPolicyList
	if err := c.Get().Namespace("x").Resource("stagednetworkpolicies").Do(context.Background()).Into(&nps); err != nil {
		t.Fatal(err)
	}
	if len(nps.Items) != 1 || nps.ResourceVersion != "7" || nps.Items[0].Name != "only-web" || nps.Items[0].Spec.PodSelector.MatchLabels["app"] != "web" {
		t.Fatalf("StagedNetworkPolicyList = %+v", nps)
	}
	var cnps StagedClusterNetworkPolicyList
	if err := c.Get().Resource("stagedclusternetworkpolicies").Do(context.Background()).Into(&cnps); err != nil {
		t.Fatal(err)
	}
	if len(cnps.Items) != 1 || cnps.Items[0].Name != "dns" || cnps.Items[0].Spec.Priority != 5 || string(cnps.Items[0].Spec.Tier) != "Admin" {
		t.Fatalf("StagedClusterNetworkPolicyList = %+v", cnps)
	}

	cp := nps.DeepCopyObject().(*StagedNetworkPolicyList)
	cp.Items[0].Spec.PodSelector.MatchLabels["app"] = "db"
	cp.Items[0].Labels = map[string]string{"x": "y"}
	ccp := cnps.Items[0].DeepCopyObject().(*StagedClusterNetworkPolicy)
	ccp.Spec.Priority = 9
	if nps.Items[0].Spec.PodSelector.MatchLabels["app"] != "web" || nps.Items[0].Labels != nil || cnps.Items[0].Spec.Priority != 5 {
		t.Errorf("a deep copy's change reached the original: %+v, %+v", nps.Items[0], cnps.Items[0])
	}
}
