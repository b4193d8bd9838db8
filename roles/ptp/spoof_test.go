package ptp_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

// TestIPSpoofCheck: a ptp pod's ADD checks its veth (ipspoofchk is on by
// default): through the node it reaches another pod from its own
// addresses, not from a foreign one (IPv4 and IPv6); with "ipspoofchk":
// false it can. DEL (twice) removes the check.
func TestIPSpoofCheck(t *testing.T) {
	n := newNode(t)
	host := roletest.Open(t, "")
	on, off := conf("1.0.0", dual, ""), conf("1.0.0", dual, `,"ipspoofchk":false`)
	victim, attacker := n.NewPod("victim"), n.NewPod("attacker")
	vips := podIPs(t, n.Must(ptp.Role, "ADD", victim, on))
	aips := podIPs(t, n.Must(ptp.Role, "ADD", attacker, on))
	port := attach.HostVethName(attacker.ID, "eth0")
	// Its addresses, and with IPv6 its link-local address.
	want := append(slices.Clone(aips), nft.PodLinkLocal(port))
	if got, err := host.NFT().SourceCheckAddrs(nft.SrcCheckRouted, port); err != nil || !slices.Equal(got, want) {
		t.Errorf("the attacker's veth may send from %v (%v), want %v", got, err, want)
	}
	foreign := []netip.Addr{netip.MustParseAddr("10.77.0.99"), netip.MustParseAddr("fd77::99")}
	for i, vip := range vips {
		sink := nstest.ListenUDP(t, victim.Netns, vip)
		if !nstest.SendFrom(t, attacker.Netns, aips[i], sink, 10*time.Second) {
			t.Errorf("the attacker's datagram from its own %s did not arrive", aips[i])
		}
		if nstest.SendFrom(t, attacker.Netns, foreign[i], sink, 1500*time.Millisecond) {
			t.Errorf("the attacker's datagram from %s got through its veth", foreign[i])
		}
	}
	n.Must(ptp.Role, "DEL", attacker, on)
	n.Must(ptp.Role, "DEL", attacker, on)
	if got, _ := host.NFT().SourceCheckAddrs(nft.SrcCheckRouted, port); len(got) != 0 {
		t.Errorf("after the DELs the veth keeps %v", got)
	}

	// Opted out, the same pod sends as anyone.
	n.Must(ptp.Role, "ADD", attacker, off)
	for i, vip := range vips {
		sink := nstest.ListenUDP(t, victim.Netns, vip)
		if !nstest.SendFrom(t, attacker.Netns, foreign[i], sink, 10*time.Second) {
			t.Errorf(`with "ipspoofchk": false a datagram from %s did not arrive`, foreign[i])
		}
	}
	n.Must(ptp.Role, "DEL", attacker, off)
	n.Must(ptp.Role, "DEL", victim, on)
	n.Empty("ptpnet")
}

// podIPs are the pod's addresses in an ADD result.
func podIPs(t *testing.T, out []byte) []netip.Addr {
	t.Helper()
	var ips []netip.Addr
	for _, ipc := range roletest.Result(t, out, "1.0.0").IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		ips = append(ips, a.Unmap())
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}
