package bridge_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestIPSpoofCheck: a pod's ADD checks its port (ipspoofchk is on by
// default): it reaches another pod from its own address, not from the
// gateway's or a foreign one; a pod of a network with "ipspoofchk": false
// can send from any address. DEL (twice) removes the port's elements, and
// GC the elements of a port whose veth went without a DEL.
func TestIPSpoofCheck(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brspoof") })
	on := gwConf("spoof", "brspoof", 12, "")
	// Another network on the same bridge and subnet, which opts out.
	off := []byte(`{"cniVersion":"1.0.0","name":"nospoof","type":"bridge","bridge":"brspoof","isGateway":true,"ipspoofchk":false,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.11.12.0/24","rangeStart":"10.11.12.100","gateway":"10.11.12.1"}]]}}`)
	victim, attacker, rogue := n.NewPod("victim"), n.NewPod("attacker"), n.NewPod("rogue")
	vip := podAddr(t, n.Must(bridge.Role, "ADD", victim, on))
	aip := podAddr(t, n.Must(bridge.Role, "ADD", attacker, on))
	n.Must(bridge.Role, "ADD", rogue, off)
	port := bridge.HostVethName(attacker.ID, "eth0")
	if got, err := host.NFT().SourceCheckAddrs(nft.SrcCheckBridge, port); err != nil || !slices.Equal(got, []netip.Addr{aip}) {
		t.Errorf("the attacker's port may send from %v (%v), want [%s]", got, err, aip)
	}
	if got, _ := host.NFT().SourceCheckAddrs(nft.SrcCheckBridge, bridge.HostVethName(rogue.ID, "eth0")); len(got) != 0 {
		t.Errorf("the opted-out port is checked: %v", got)
	}

	sink := nstest.ListenUDP(t, victim.Netns, vip)
	if !nstest.SendFrom(t, attacker.Netns, aip, sink, 10*time.Second) {
		t.Error("the attacker's datagram from its own address did not arrive")
	}
	for _, src := range []netip.Addr{netip.MustParseAddr("10.11.12.1"), netip.MustParseAddr("10.11.12.99")} {
		if nstest.SendFrom(t, attacker.Netns, src, sink, 1500*time.Millisecond) {
			t.Errorf("the attacker's datagram from %s got through its port", src)
		}
	}
	if !nstest.SendFrom(t, rogue.Netns, netip.MustParseAddr("10.11.12.99"), sink, 10*time.Second) {
		t.Error(`a pod of a network with "ipspoofchk": false could not send from a foreign address`)
	}

	n.Must(bridge.Role, "DEL", attacker, on)
	n.Must(bridge.Role, "DEL", attacker, on)
	if ports, err := host.NFT().SourceCheckPorts(nft.SrcCheckBridge); err != nil || slices.Contains(ports, port) {
		t.Errorf("checked ports after the DELs: %v (%v)", ports, err)
	}
	if got, _ := host.NFT().SourceCheckAddrs(nft.SrcCheckBridge, port); len(got) != 0 {
		t.Errorf("the deleted port keeps %v", got)
	}

	// The victim's veth goes without a DEL: GC removes its check.
	vport := bridge.HostVethName(victim.ID, "eth0")
	if err := host.DeleteLink(vport); err != nil {
		t.Fatal(err)
	}
	gcConf := []byte(strings.Replace(string(on), `"1.0.0"`, `"1.1.0"`, 1))
	n.Must(bridge.Role, "GC", victim, roletest.WithKeep(t, gcConf))
	if ports, _ := host.NFT().SourceCheckPorts(nft.SrcCheckBridge); slices.Contains(ports, vport) {
		t.Errorf("GC left the check of %s, whose veth is gone: %v", vport, ports)
	}
	n.Must(bridge.Role, "DEL", rogue, off)
}
