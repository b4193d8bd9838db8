package podapi

import (
	"context"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// nadSource answers every NAD question with one config.
type nadSource struct {
	recordSource
	config string
}

func (n *nadSource) NetAttachDef(_ context.Context, ns, name string) (*agentapi.NetAttachDef, error) {
	return &agentapi.NetAttachDef{Namespace: ns, Name: name, Config: n.config}, nil
}

// TestNADNodeWideKeys: a NAD whose config sets dataDir or logFile (at the
// top, in ipam, in a conflist's plugin) is refused as a bad request; an
// ordinary one is answered.
func TestNADNodeWideKeys(t *testing.T) {
	for _, tc := range []struct {
		config string
		ok     bool
	}{
		{`{"cniVersion":"1.0.0","type":"bridge","dataDir":"/tmp/evil"}`, false},
		{`{"cniVersion":"1.0.0","type":"bridge","logFile":"/etc/cron.d/x"}`, false},
		{`{"cniVersion":"1.0.0","type":"bridge","ipam":{"type":"host-local","dataDir":"/tmp/evil"}}`, false},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"tuning","logFile":"/x"}]}`, false},
		{`{"cniVersion":"1.0.0","type":"macvlan","master":"eth0","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`, true},
	} {
		resp := handle(context.Background(), &nadSource{config: tc.config}, agentapi.Request{Op: agentapi.OpNetAttachDef, Namespace: "default", Name: "net1"}, Access{GID: NoGroup})
		if got := resp.Error == ""; got != tc.ok {
			t.Errorf("%s: answered %v (%s %s), want %v", tc.config, got, resp.Reason, resp.Error, tc.ok)
		}
		if !tc.ok && (resp.Reason != agentapi.ReasonBadRequest || resp.NetAttachDef != nil) {
			t.Errorf("%s: reason %q, NAD %v; want a bad request and no NAD", tc.config, resp.Reason, resp.NetAttachDef)
		}
	}
}
