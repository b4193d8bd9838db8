package multi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles/internal/delegatetest"
	"github.com/cnibox/cnibox/roles/multi"
)

// TestDelConfigRefused: multi's config edited in place after ADD into one
// ADD refuses (a delegate's mtu 70000) does not stop DEL (twice): it
// replays the recorded delegates, and both interfaces, their addresses and
// the record go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	n := delegatetest.NewNode(t)
	netA := muList("neta", "1.0.0", muBridge("mu-da", "11"))
	netB := muSingle("netb", "1.0.0", muBridge("mu-db", "12"))
	badB := muSingle("netb", "1.0.0", strings.Replace(muBridge("mu-db", "12"), `"isGateway":true`, `"isGateway":true,"mtu":70000`, 1))
	m := n.NewPod("delref")
	var delegates []json.RawMessage
	for _, d := range []string{netA, badB} {
		delegates = append(delegates, json.RawMessage(d))
	}
	n.DelRefused(multi.Role, m, []byte(muConf("1.0.0", netA, netB)), map[string]any{"delegates": delegates}, "")
	for _, ifname := range []string{"eth0", "net1"} {
		if hasLink(t, m.Netns, ifname) {
			t.Errorf("the pod's %s is still there after DEL", ifname)
		}
	}
	for _, network := range []string{"neta", "netb"} {
		if got := n.Reservations(network); len(got) != 0 {
			t.Errorf("reservations of %s left after DEL: %v", network, got)
		}
	}
	if got := n.Records("multinet"); len(got) != 0 {
		t.Errorf("records left after DEL: %+v", got)
	}
}
