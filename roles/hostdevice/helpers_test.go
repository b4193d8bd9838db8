package hostdevice

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

var (
	lanHost  = netip.MustParseAddr("10.62.0.1")
	nodeAddr = netip.MustParsePrefix("10.63.0.2/24") // the device's own address on the node
)

func newNode(t *testing.T) *roletest.Node { return roletest.NewNode(t, Role, hostlocal.Role) }

// newDevice gives the node a device called name that stands in for a NIC:
// a veth whose peer is in a LAN namespace (host 10.62.0.1, fd62::1), with
// an address of its own on the node, MTU 1400, up. It returns its state.
func newDevice(t *testing.T, name string) netops.DeviceState {
	t.Helper()
	lan := roletest.Open(t, nstest.NewNS(t, "lan"))
	host := roletest.Open(t, "")
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: name, PeerName: "eth0", Peer: lan, MTU: 1400}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink(name) })
	for _, a := range []string{"10.62.0.1/24", "fd62::1/64"} {
		if err := lan.EnsureAddr("eth0", netip.MustParsePrefix(a), netops.AddrOpts{NoDAD: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := host.EnsureAddr(name, nodeAddr, netops.AddrOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := host.SetLinkUp(name); err != nil {
		t.Fatal(err)
	}
	st, err := host.DeviceStateOf(name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// backAsItWas fails the test unless the node has the device as st says.
func backAsItWas(t *testing.T, st netops.DeviceState) {
	t.Helper()
	host := roletest.Open(t, "")
	got, err := host.DeviceStateOf(st.Name)
	if err != nil {
		t.Fatalf("the device %s is not back on the node: %v", st.Name, err)
	}
	if got.MTU != st.MTU || got.Up != st.Up || got.MAC.String() != st.MAC.String() || !slices.Equal(got.Addrs, st.Addrs) {
		t.Errorf("the device is back as %+v, want %+v", got, st)
	}
	if alias, _ := host.LinkAlias(st.Name); alias != "" {
		t.Errorf("the device kept the alias %q", alias)
	}
}

// netConf is a host-device network naming the device by extra (fields
// starting with a comma); ranges is host-local's "ranges" JSON.
func netConf(v, extra, ranges string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"hdnet","type":"host-device"%s,
		"ipam":{"type":"host-local","ranges":%s,"routes":[{"dst":"192.168.62.0/24"}]}}`, v, extra, ranges))
}

const (
	v4   = `[[{"subnet":"10.62.0.0/24","rangeStart":"10.62.0.10","gateway":"10.62.0.1"}]]`
	dual = `[[{"subnet":"10.62.0.0/24","rangeStart":"10.62.0.10","gateway":"10.62.0.1"}],[{"subnet":"fd62::/64","rangeStart":"fd62::10","gateway":"fd62::1"}]]`
)
