package whereabouts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// Without the agent: ADD fails with "try again later" and says what to
// run; DEL succeeds and leaves the release for the agent in the data
// directory (a second DEL replaces it); STATUS is not ready.
func TestNoAgent(t *testing.T) {
	n := roletest.NewIPAMNode(t, Role)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	c := roletest.IPAMConf("1.1.0", `{"type":"whereabouts","range":"10.1.0.0/24","agentSocket":"`+sock+`"}`)
	env := map[string]string{"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p0"}
	_, err := n.Call(Role, "ADD", "c1", c, env)
	roletest.CheckErr(t, err, 11, sock, "--cluster-ipam")
	n.Must(Role, "DEL", "c1", c, env)
	n.Must(Role, "DEL", "c1", c, env)
	files, _ := filepath.Glob(filepath.Join(n.Dir, PendingDir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("pending releases %v, want one", files)
	}
	b, _ := os.ReadFile(files[0])
	var req agentapi.IPAMRequest
	if err := json.Unmarshal(b, &req); err != nil || req.ContainerID != "c1" || req.IfName != "eth0" || req.PodRef != "ns/p0" || req.Ranges[0].Range != "10.1.0.0/24" {
		t.Errorf("pending release %s (%v)", b, err)
	}
	_, err = n.Call(Role, "GC", "", c, nil)
	roletest.CheckErr(t, err, 7, "cni.dev/valid-attachments")
	// A network without node_slice_size too: only the agent knows whether
	// its default slice size slices it, so GC asks it.
	gcc := roletest.IPAMConf("1.1.0", `{"type":"whereabouts","range":"10.1.0.0/24","agentSocket":"`+sock+`"}`, `"cni.dev/valid-attachments":[]`)
	_, err = n.Call(Role, "GC", "", gcc, nil)
	roletest.CheckErr(t, err, 11, sock, "--cluster-ipam")
	_, err = n.Call(Role, "STATUS", "", c, nil)
	roletest.CheckErr(t, err, 50, "not ready")
	// Static addresses alone need no agent.
	out := n.Must(Role, "ADD", "c2", roletest.IPAMConf("1.0.0", `{"addresses":[{"address":"10.5.0.5/24","gateway":"10.5.0.1"}],"agentSocket":"`+sock+`"}`), nil)
	if r := roletest.ParseIPAM(t, out); len(r.IPs) != 1 || r.IPs[0].Address != "10.5.0.5/24" || r.IPs[0].Gateway != "10.5.0.1" {
		t.Errorf("static result %s", out)
	}
}
