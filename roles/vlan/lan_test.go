package vlan_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vlan"
)

var (
	lanHost4 = netip.MustParseAddr("10.58.0.1")
	lanHost6 = netip.MustParseAddr("fd58::1")
)

func newNode(t *testing.T) *roletest.Node { return roletest.NewNode(t, vlan.Role, hostlocal.Role) }

var open = roletest.Open

// newLAN creates the LAN namespace behind the node's NIC lan0 (untagged
// 10.58.1.0/24, the node's default route via the LAN host 10.58.1.1) and
// returns it. The node has an eth0 of its own too, as nodes do, which the
// pods' eth0 must not clash with. It needs no 802.1Q: the config error tests
// run on any kernel.
func newLAN(t *testing.T) string {
	t.Helper()
	lan := roletest.NewLAN(t, []string{"10.58.1.1/24"}, []string{"10.58.1.2/24"})
	host := lan.Node
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0peer", Peer: host}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink("eth0") })
	must(t, lan.LAN.SetLinkUp("eth0"))
	must(t, host.SetLinkUp("lan0"))
	must(t, host.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.58.1.1"), Dev: "lan0"}))
	return lan.NS
}

// newVLAN is newLAN with the LAN host on VLAN 42 too (eth0.42: 10.58.0.1/24,
// fd58::1/64). It skips the test on a kernel without 802.1Q.
func newVLAN(t *testing.T) string {
	t.Helper()
	lan := newLAN(t)
	l := open(t, lan)
	_, err := l.EnsureVlan(netops.VlanOpts{Name: "eth0.42", Master: "eth0", ID: 42})
	nstest.SkipIfKernelLacks(t, "802.1Q (8021q)", err)
	must(t, err)
	for _, a := range []string{"10.58.0.1/24", "fd58::1/64"} {
		must(t, l.EnsureAddr("eth0.42", netip.MustParsePrefix(a), netops.AddrOpts{NoDAD: true}))
	}
	must(t, l.SetLinkUp("eth0.42"))
	return lan
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// conf is a vlan network; extra are more fields (",\"master\":...");
// ranges is host-local's "ranges" JSON.
func conf(v, ranges, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"vlnet","type":"vlan"%s,
		"ipam":{"type":"host-local","ranges":%s,"routes":[{"dst":"192.168.58.0/24"}]}}`, v, extra, ranges))
}

const (
	v4   = `[[{"subnet":"10.58.0.0/24","rangeStart":"10.58.0.10","gateway":"10.58.0.1"}]]`
	dual = `[[{"subnet":"10.58.0.0/24","rangeStart":"10.58.0.10","gateway":"10.58.0.1"}],[{"subnet":"fd58::/64","rangeStart":"fd58::10","gateway":"fd58::1"}]]`
)
