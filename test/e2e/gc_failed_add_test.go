package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/nodestate"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/store"
)

// TestCLIGCFailedADD: a runtime's ADD of a list whose last plugin does not
// speak the list's cniVersion fails, and the runtime's DEL after it
// (libcni's DelNetworkList) stops at that plugin, so bridge's DEL never
// runs: each retry, in a namespace of its own that the runtime keeps, leaves
// an address, a record and a veth. gc keeps them while an ADD could still be
// in flight (nodestate.AddGrace) and reclaims them after it (rule 1c: no
// entry of the container in the runtime's cache, which holds a live pod's);
// the live pod keeps everything. (At 48e1376 gc found nothing: every
// namespace was alive.)
func TestCLIGCFailedADD(t *testing.T) {
	e := newEnv(t)
	old := "#!/bin/sh\ncase \"$CNI_COMMAND\" in\n" +
		"VERSION) echo '{\"cniVersion\":\"0.3.1\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\"]}' ;;\n" +
		"*) echo '{\"cniVersion\":\"0.3.1\",\"code\":1,\"msg\":\"incompatible CNI versions\"}'; exit 1 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(e.binDir, "oldplugin"), []byte(old), 0o755); err != nil {
		t.Fatal(err)
	}
	good := loadList(t, repoFile("examples", "10-bridge.conflist"))
	leaky := listFromJSON(t, `{"cniVersion": "1.0.0", "name": "leaky", "plugins": [
		{"type": "bridge", "bridge": "cbxleak0", "isGateway": true,
		 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.78.0/24"}]]}},
		{"type": "oldplugin"}]}`)
	live := e.newPod("live")
	e.add(good, live)
	defer e.del(good, live)

	var failed []*pod
	for range 3 { // a kubelet's retries: a new sandbox each time
		p := e.newPod("leak")
		if _, err := e.cni.AddNetworkList(context.Background(), leaky, p.rt); err == nil {
			t.Fatal("ADD of the list with a plugin of another cniVersion succeeded")
		}
		if err := e.cni.DelNetworkList(context.Background(), leaky, p.rt); err == nil {
			t.Fatal("libcni's DEL after it succeeded: the leak this test is about is gone")
		}
		failed = append(failed, p)
	}
	if got := e.reservations("leaky"); len(got) != 3 {
		t.Fatalf("reservations of leaky after three failed ADDs: %v, want 3 (the leak)", got)
	}
	type orphan struct {
		Kind        string `json:"kind"`
		Network     string `json:"network"`
		ContainerID string `json:"containerID"`
		Veth        string `json:"veth"`
		Reason      string `json:"reason"`
		Done        bool   `json:"done"`
	}
	gc := func(args ...string) []orphan {
		t.Helper()
		var got []orphan
		e.cliJSON(&got, 0, append([]string{"gc", "--cache-dir", e.cacheDir}, args...)...)
		return got
	}
	for _, o := range gc("--dry-run") {
		if o.Network == "leaky" || slices.ContainsFunc(failed, func(p *pod) bool { return p.id == o.ContainerID }) {
			t.Errorf("gc --dry-run right after the failed ADDs finds %+v: an ADD in flight looks the same", o)
		}
	}

	// Older than an ADD in flight can be.
	st, err := store.Open(e.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := st.Endpoints("leaky")
	for _, ep := range eps {
		ep.Created = time.Now().Add(-nodestate.AddGrace - time.Minute)
		if err == nil {
			err = st.PutEndpoint(ep)
		}
	}
	st.Close()
	if err != nil || len(eps) != 3 {
		t.Fatalf("age the records: %v (%d records, want 3)", err, len(eps))
	}

	got := gc()
	for _, p := range failed {
		found := false
		for _, o := range got {
			found = found || (o.Kind == "endpoint" && o.ContainerID == p.id && o.Done)
		}
		if !found {
			b, _ := json.Marshal(got)
			t.Errorf("gc did not remove the endpoint of the failed ADD %s: %s", p.id, b)
		}
		if v := bridge.HostVethName(p.id, "eth0"); hasLink(t, v) {
			t.Errorf("host veth %s of the failed ADD left after gc", v)
		}
	}
	for _, o := range got {
		if o.ContainerID == live.id {
			t.Errorf("gc removed the live pod's %+v", o)
		}
	}
	if left := e.reservations("leaky"); len(left) != 0 {
		t.Errorf("reservations of leaky after gc: %v, want none", left)
	}
	if len(e.reservations("cnibox")) != 1 {
		t.Errorf("the live pod's reservation: %v, want it kept", e.reservations("cnibox"))
	}
}
