package macvlan_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

// The LAN: a namespace with one host (10.55.0.1, fd55::1) behind a veth
// whose node end (lan0) stands in for the node's NIC.
var (
	lanHost4 = netip.MustParseAddr("10.55.0.1")
	lanHost6 = netip.MustParseAddr("fd55::1")
)

func newNode(t *testing.T) *roletest.Node { return roletest.NewNode(t, macvlan.Role, hostlocal.Role) }

// newLAN creates the LAN namespace and the node's NIC lan0 (10.55.0.2/24,
// fd55::2/64, the node's default route via the LAN host). It returns the
// LAN's path.
func newLAN(t *testing.T) string {
	t.Helper()
	lan := roletest.NewLAN(t, []string{"10.55.0.1/24", "fd55::1/64"}, []string{"10.55.0.2/24", "fd55::2/64"})
	if err := lan.Node.EnsureRoute(netops.Route{GW: lanHost4, Dev: "lan0"}); err != nil {
		t.Fatal(err)
	}
	// The LAN host learns neighbours from gratuitous ARP.
	if err := lan.LAN.SetSysctl("net/ipv4/conf/eth0/arp_accept", "1"); err != nil {
		t.Fatal(err)
	}
	return lan.NS
}

// conf is a macvlan network on lan0; ranges is host-local's "ranges" JSON.
func conf(v, ranges, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"mvnet","type":"macvlan"%s,
		"ipam":{"type":"host-local","ranges":%s,"routes":[{"dst":"192.168.55.0/24"}]}}`, v, extra, ranges))
}

const (
	v4   = `[[{"subnet":"10.55.0.0/24","rangeStart":"10.55.0.10","gateway":"10.55.0.1"}]]`
	dual = `[[{"subnet":"10.55.0.0/24","rangeStart":"10.55.0.10","gateway":"10.55.0.1"}],[{"subnet":"fd55::/64","rangeStart":"fd55::10","gateway":"fd55::1"}]]`
)
