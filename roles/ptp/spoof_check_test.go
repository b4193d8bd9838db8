package ptp_test

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

// TestCheckIPSpoofCheck: CHECK verifies the host end's source address
// check as it verifies the node's routes to the pod: it passes after ADD,
// fails with code 5 naming the host end, tables inet and arp cnibox-src
// and the pod's addresses when the check is gone, names the IPv6 address
// alone when only its element is gone, and passes again once the elements
// are back; with "ipspoofchk": false there is nothing to check.
func TestCheckIPSpoofCheck(t *testing.T) {
	n := newNode(t)
	host := roletest.Open(t, "")
	c := conf("1.0.0", dual, "")
	p := n.NewPod("pod")
	out := n.Must(ptp.Role, "ADD", p, c)
	ips := podIPs(t, out)
	port := attach.HostVethName(p.ID, "eth0")
	check := roletest.WithPrev(t, c, out)
	n.Must(ptp.Role, "CHECK", p, check)
	checkFails := func(words ...string) {
		t.Helper()
		_, err := n.Call(ptp.Role, "CHECK", p, check)
		if err == nil || roletest.Code(err) != 5 {
			t.Fatalf("CHECK: %v, want code 5", err)
		}
		for _, w := range append([]string{"ipspoofchk", port, "DEL and ADD"}, words...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CHECK's error does not name %q: %v", w, err)
			}
		}
	}
	if err := host.NFT().DeleteSourceCheck(nft.SrcCheckRouted, port, nil); err != nil {
		t.Fatal(err)
	}
	checkFails("table inet cnibox-src has no element for the port", "table arp cnibox-src has no element for the port", ips[0].String(), ips[1].String())
	if err := host.NFT().EnsureSourceCheck(nft.SrcCheckRouted, port, ips[:1]); err != nil {
		t.Fatal(err)
	}
	checkFails("table inet cnibox-src has no element for the pod's addresses " + ips[1].String() + " (set addr6)")
	if err := host.NFT().EnsureSourceCheck(nft.SrcCheckRouted, port, ips); err != nil {
		t.Fatal(err)
	}
	n.Must(ptp.Role, "CHECK", p, check)
	n.Must(ptp.Role, "DEL", p, c)

	off := conf("1.0.0", dual, `,"ipspoofchk":false`)
	out = n.Must(ptp.Role, "ADD", p, off)
	n.Must(ptp.Role, "CHECK", p, roletest.WithPrev(t, off, out))
	n.Must(ptp.Role, "DEL", p, off)
	n.Must(ptp.Role, "DEL", p, off)
	n.Empty("ptpnet")
}
