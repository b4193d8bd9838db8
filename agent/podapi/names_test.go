package podapi

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// recordSource answers every question and records that it was asked.
type recordSource struct{ asked []string }

func (r *recordSource) Pod(_ context.Context, ns, name, _ string) (*agentapi.Pod, error) {
	r.asked = append(r.asked, ns+"/"+name)
	return &agentapi.Pod{Namespace: ns, Name: name}, nil
}

func (r *recordSource) NetAttachDef(_ context.Context, ns, name string) (*agentapi.NetAttachDef, error) {
	r.asked = append(r.asked, ns+"/"+name)
	return &agentapi.NetAttachDef{Namespace: ns, Name: name}, nil
}

func (r *recordSource) SetNetworkStatus(_ context.Context, ns, name, _ string, _ json.RawMessage) error {
	r.asked = append(r.asked, ns+"/"+name)
	return nil
}

// TestHostileNames: a namespace or name that is not DNS-1123 (a "../" that
// would walk the API path to any GET the agent may do) is refused as a bad
// request before any API call; valid names are asked.
func TestHostileNames(t *testing.T) {
	for _, tc := range []struct{ op, ns, name string }{
		{agentapi.OpNetAttachDef, "default", "../../../../api/v1/secrets"},
		{agentapi.OpNetAttachDef, "..", "x"},
		{agentapi.OpPod, "kube-system/secrets", "x"},
		{agentapi.OpPod, "default", "a/b"},
		{agentapi.OpSetNetworkStatus, "Default", "pod"},
		{agentapi.OpPod, "default", "pod?watch=1"},
	} {
		src := &recordSource{}
		resp := handle(context.Background(), src, agentapi.Request{Op: tc.op, Namespace: tc.ns, Name: tc.name}, Access{GID: NoGroup})
		if resp.Reason != agentapi.ReasonBadRequest || len(src.asked) != 0 {
			t.Errorf("%s %q/%q: reason %q (%s), asked %q; want a bad request and no API call", tc.op, tc.ns, tc.name, resp.Reason, resp.Error, src.asked)
		}
	}
	src := &recordSource{}
	resp := handle(context.Background(), src, agentapi.Request{Op: agentapi.OpNetAttachDef, Namespace: "kube-system", Name: "macvlan-conf.v2"}, Access{GID: NoGroup})
	if resp.Error != "" || len(src.asked) != 1 {
		t.Errorf("a valid NAD name: %q, asked %q", resp.Error, src.asked)
	}
}
