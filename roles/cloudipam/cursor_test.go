package cloudipam_test

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles/cloudipam"
)

// Round robin survives a refresh of the pool: after the host agent lists a
// new secondary IP, the next pod gets the address after the last one handed
// out, not the first free one (which a pod released a moment ago).
func TestAzureRoundRobinAcrossRefresh(t *testing.T) {
	addNIC(t, "eth0", fixtureMAC)
	fx := fixture(t)
	ag := newAgent(t, fx)
	n := newNode(t, ag.URL())
	conf := azureConf("1.0.0", `,"queryInterval":0`) // ask on every call
	role := cloudipam.AzureRole

	for i, cid := range []string{"a", "b", "c"} {
		if got := parse(t, n.must(role, "ADD", cid, conf)).IPs[0].Address; got != []string{"10.240.0.36/16", "10.240.0.37/16", "10.240.0.38/16"}[i] {
			t.Fatalf("pod %s got %s", cid, got)
		}
	}
	n.must(role, "DEL", "a", conf)
	n.must(role, "DEL", "a", conf)

	// The agent now also lists 10.240.0.70.
	ag.Set(strings.Replace(fx, `<IPAddress Address="10.240.0.65" IsPrimary="false"/>`,
		`<IPAddress Address="10.240.0.65" IsPrimary="false"/><IPAddress Address="10.240.0.70" IsPrimary="false"/>`, 1))
	if got := parse(t, n.must(role, "ADD", "d", conf)).IPs[0].Address; got != "10.240.0.39/16" {
		t.Errorf("after the refresh pod d got %s, want 10.240.0.39/16 (after the last address handed out)", got)
	}
	if c := n.cache("azure"); len(c.NICs) != 1 || len(c.NICs[0].Addrs) != 31 {
		t.Fatalf("the refresh did not add the address: %+v", c)
	}
}
