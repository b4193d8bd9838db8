package macvlan_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
	"github.com/cnibox/cnibox/roles/static"
)

// TestVethMasterRefused is issue 48's reproduction at the role: a pod
// whose eth0 is a veth into the node (its default route) asks for a
// macvlan with linkInContainer and no master (so eth0), passthru, and the
// node's address 10.99.0.1. The ADD is refused with error 7 naming master
// and the opt-in, and leaves nothing in the pod: eth0 keeps its MAC and
// addresses. The same on a named veth of the node, in bridge mode, too.
// "allowVethMaster": true (a trusted config's opt-in) still attaches.
func TestVethMasterRefused(t *testing.T) {
	n := roletest.NewNode(t, macvlan.Role, hostlocal.Role, static.Role)
	node := roletest.Open(t, "")
	p := n.NewPod("spoof")
	pod := roletest.Open(t, p.Netns)
	for _, v := range []struct{ host, peer, addr string }{{"vm-eth0", "eth0", "10.99.0.5/24"}, {"vm-net1", "net1", "10.98.0.5/24"}} {
		if _, _, err := node.EnsureVeth(netops.VethOpts{HostName: v.host, PeerName: v.peer, Peer: pod}); err != nil {
			t.Fatal(err)
		}
		if err := pod.EnsureAddr(v.peer, netip.MustParsePrefix(v.addr), netops.AddrOpts{NoDAD: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := node.EnsureAddr("vm-eth0", netip.MustParsePrefix("10.99.0.1/24"), netops.AddrOpts{NoDAD: true}); err != nil {
		t.Fatal(err)
	}
	if err := pod.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.99.0.1"), Dev: "eth0"}); err != nil {
		t.Fatal(err)
	}
	eth0, err := pod.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	static := `"ipam":{"type":"static","addresses":[{"address":"10.99.0.1/32"}]}`
	for _, extra := range []string{`"mode":"passthru"`, `"master":"net1","mode":"bridge"`, `"master":"eth0","mode":"private"`} {
		c := []byte(`{"cniVersion":"1.0.0","name":"spoof","type":"macvlan","linkInContainer":true,` + extra + `,` + static + `}`)
		_, err := n.Call(macvlan.Role, "ADD", p, c, "CNI_IFNAME", "mv1")
		if cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), `"master"`) || !strings.Contains(err.Error(), "allowVethMaster") {
			t.Errorf("%s: ADD = %v, want 7 naming master and allowVethMaster", extra, err)
		}
		if _, err := pod.LinkByName("mv1"); err == nil {
			t.Errorf("%s: the refused ADD left mv1 in the pod", extra)
		}
		n.Must(macvlan.Role, "DEL", p, c, "CNI_IFNAME", "mv1")
	}
	after, err := pod.LinkByName("eth0")
	if err != nil || after.MAC.String() != eth0.MAC.String() || !after.Up {
		t.Errorf("eth0 after the refused ADDs: %+v, %v; want it as it was (MAC %s, up)", after, err, eth0.MAC)
	}
	n.Empty("spoof")

	// The opt-in of a config that is meant to route for others.
	c := []byte(`{"cniVersion":"1.0.0","name":"routes","type":"macvlan","linkInContainer":true,"master":"net1","allowVethMaster":true,` +
		`"ipam":{"type":"static","addresses":[{"address":"10.98.0.9/24"}]}}`)
	n.Must(macvlan.Role, "ADD", p, c, "CNI_IFNAME", "mv2")
	if _, err := pod.LinkByName("mv2"); err != nil {
		t.Errorf("allowVethMaster: no mv2 in the pod: %v", err)
	}
	for range 2 {
		n.Must(macvlan.Role, "DEL", p, c, "CNI_IFNAME", "mv2")
	}
	n.Empty("routes")
}
