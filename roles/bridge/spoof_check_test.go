package bridge_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestCheckIPSpoofCheck: CHECK verifies the port's source address check as
// it verifies the pod's addresses: it passes after ADD, fails with code 5
// naming the port, table bridge cnibox-src and the pod's address when the
// check is gone, names the address alone when only its element is gone,
// and passes again once the elements are back.
func TestCheckIPSpoofCheck(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brspchk") })
	c := gwConf("spchk", "brspchk", 13, "")
	p := n.NewPod("pod")
	out := n.Must(bridge.Role, "ADD", p, c)
	ip := podAddr(t, out)
	port := bridge.HostVethName(p.ID, "eth0")
	check := roletest.WithPrev(t, c, out)
	n.Must(bridge.Role, "CHECK", p, check)
	checkFails := func(words ...string) {
		t.Helper()
		_, err := n.Call(bridge.Role, "CHECK", p, check)
		if err == nil || roletest.Code(err) != 5 {
			t.Fatalf("CHECK: %v, want code 5", err)
		}
		for _, w := range append([]string{"ipspoofchk", port, "table bridge cnibox-src", ip.String(), "DEL and ADD"}, words...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CHECK's error does not name %q: %v", w, err)
			}
		}
	}
	if err := host.NFT().DeleteSourceCheck(nft.SrcCheckBridge, port, nil); err != nil {
		t.Fatal(err)
	}
	checkFails("no element for the port")
	// The port's element is back (with another address), the pod's is not.
	if err := host.NFT().EnsureSourceCheck(nft.SrcCheckBridge, port, []netip.Addr{netip.MustParseAddr("10.11.13.250")}); err != nil {
		t.Fatal(err)
	}
	checkFails("no element for the pod's addresses " + ip.String() + " (set addr4)")
	if err := host.NFT().DeleteSourceCheck(nft.SrcCheckBridge, port, nil); err != nil {
		t.Fatal(err)
	}
	if err := host.NFT().EnsureSourceCheck(nft.SrcCheckBridge, port, []netip.Addr{ip}); err != nil {
		t.Fatal(err)
	}
	n.Must(bridge.Role, "CHECK", p, check)
	n.Must(bridge.Role, "DEL", p, c)
	n.Must(bridge.Role, "DEL", p, c)
}
