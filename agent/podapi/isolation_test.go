package podapi

import (
	"context"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// TestNamespaceIsolation: with namespace isolation, a NAD is honoured only
// from the pod's namespace and default; without it, from any namespace.
func TestNamespaceIsolation(t *testing.T) {
	for _, tc := range []struct {
		nadNS, podNS string
		isolate, ok  bool
	}{
		{"kube-system", "team-a", true, false},
		{"team-b", "team-a", true, false},
		{"team-a", "", true, true}, // no pod namespace: a network the node config chose (clusterNetwork)
		{"team-a", "team-a", true, true},
		{"default", "team-a", true, true},
		{"kube-system", "team-a", false, true},
	} {
		src := &recordSource{}
		resp := handle(context.Background(), src, agentapi.Request{Op: agentapi.OpNetAttachDef, Namespace: tc.nadNS, Name: "net1", PodNamespace: tc.podNS},
			Access{GID: NoGroup, NamespaceIsolation: tc.isolate})
		if got := resp.Error == "" && len(src.asked) == 1; got != tc.ok {
			t.Errorf("NAD in %q for a pod in %q, isolation %v: honoured %v (%s), want %v", tc.nadNS, tc.podNS, tc.isolate, got, resp.Error, tc.ok)
		}
	}
}
