package cloudipam_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/cloudipam"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// Cloud IPAM chooses addresses with the shared allocator, in its order:
// a requested address (CNI_ARGS IP=), the sticky pod's previous one, then
// round robin.
func TestCloudRequestedAndSticky(t *testing.T) {
	addNIC(t, "eth0", fixtureMAC)
	ag := newAgent(t, fixture(t))
	n := newNode(t, ag.URL())
	conf := azureConf("1.0.0", `,"queryInterval":"1h","sticky":true`)
	role := cloudipam.AzureRole
	podArgs := func(name, extra string) {
		n.env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name + extra
	}

	podArgs("req", ";IP=10.240.0.50")
	if got := parse(t, n.must(role, "ADD", "r1", conf)).IPs[0].Address; got != "10.240.0.50/16" {
		t.Errorf("requested 10.240.0.50, got %s", got)
	}
	podArgs("req", ";IP=10.240.0.35")
	_, err := n.call(role, "ADD", "r2", conf)
	roletest.CheckErr(t, err, 7, "10.240.0.35") // the node's primary address is never handed out

	podArgs("web", "")
	if got := parse(t, n.must(role, "ADD", "w1", conf)).IPs[0].Address; got != "10.240.0.36/16" {
		t.Fatalf("web got %s", got)
	}
	n.must(role, "DEL", "w1", conf)
	n.must(role, "DEL", "w1", conf)
	podArgs("other", "")
	if got := parse(t, n.must(role, "ADD", "o1", conf)).IPs[0].Address; got != "10.240.0.37/16" {
		t.Errorf("round robin after web's DEL gave %s, want 10.240.0.37/16", got)
	}
	podArgs("web", "")
	if got := parse(t, n.must(role, "ADD", "w2", conf)).IPs[0].Address; got != "10.240.0.36/16" {
		t.Errorf("sticky web came back with %s, want its previous 10.240.0.36/16", got)
	}
}
