package vxlan_test

import (
	"path/filepath"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/flannel"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/delegatetest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vxlan"
	"github.com/cnibox/cnibox/store"
)

// TestDelConfigRefused: a vxlan config edited in place after ADD into one
// ADD refuses (a device name that is no interface name) does not stop DEL
// (twice): the flannel role it hands over to replays its record, and the
// pod's interface, address and record go (issue 62). The lease is a
// subnet file (flanneld's); no agent runs.
func TestDelConfigRefused(t *testing.T) {
	n := roletest.NewNodeWith(t, cniplug.NewRegistry(vxlan.Role, flannel.Role, bridge.Role, hostlocal.Role))
	subnetFile := filepath.Join(t.TempDir(), "subnet.env")
	delegatetest.WriteSubnetEnv(t, subnetFile, "10.244.13.1/24")
	n.Env[flannel.EnvFlannelDataDir] = filepath.Join(t.TempDir(), "flannel-data") // not there: the node never ran flannel's plugin
	p := n.NewPod("delref")
	c := []byte(`{"cniVersion":"1.0.0","name":"vxnet","type":"vxlan","subnetFile":"` + subnetFile + `","delegate":{"bridge":"vx-delref"}}`)
	n.DelRefused(vxlan.Role, p, c, map[string]any{"device": "not a name"}, "device")
	if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("the pod's eth0 is still there after DEL")
	}
	n.Empty("vxnet")
	if recs := roletest.Look(n, func(st *store.Store) ([]delegaterec.Record, error) { return delegaterec.Records.In(st).List("vxnet") }); len(recs) != 0 {
		t.Errorf("delegate records left after DEL: %+v", recs)
	}
}
