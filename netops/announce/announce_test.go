package announce_test

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/vishvananda/netlink"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/announce"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestAddr: a gratuitous ARP sent on a veth in one namespace reaches the
// other end, in another namespace, as an ARP request from the veth's MAC
// whose sender and target address are the announced address, to the
// broadcast address.
func TestAddr(t *testing.T) {
	a := labtest.OpenNS(t, "ana")
	b := labtest.OpenNS(t, "anb")
	host, _, err := a.EnsureVeth(netops.VethOpts{HostName: "veth0", PeerName: "eth0", Peer: b})
	labtest.Must(t, err)
	// arp.Client wants an IPv4 address on its interface.
	labtest.Must(t, b.EnsureAddr("eth0", netip.MustParsePrefix("192.0.2.2/24"), netops.AddrOpts{}))
	var c *arp.Client
	labtest.Must(t, nstest.Run(t, b.Path(), func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, err = arp.Dial(ifi)
		return err
	}))
	defer c.Close()
	labtest.Must(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))

	ip := netip.MustParseAddr("192.0.2.10")
	labtest.Must(t, announce.Addr(a, "veth0", ip))
	for {
		p, f, err := c.Read()
		if err != nil {
			t.Fatalf("no gratuitous ARP for %s seen: %v", ip, err)
		}
		if p.SenderIP != ip {
			continue // the kernel's own ARP (none expected)
		}
		if p.Operation != arp.OperationRequest || p.TargetIP != ip || !bytes.Equal(p.SenderHardwareAddr, host.MAC) ||
			!bytes.Equal(f.Destination, ethernet.Broadcast) || !bytes.Equal(f.Source, host.MAC) {
			t.Errorf("got %v %s (%s) -> %s (%s), frame %s -> %s; want a request %s (%s) -> %s, frame to the broadcast",
				p.Operation, p.SenderIP, p.SenderHardwareAddr, p.TargetIP, p.TargetHardwareAddr, f.Source, f.Destination, ip, host.MAC, ip)
		}
		break
	}
}

// TestAddrIPv6: an unsolicited neighbour advertisement sent on a veth in
// one namespace moves the other end's neighbour entry for the address
// (cached with another MAC, as the LAN has the previous holder's) to the
// veth's MAC: what a router does with it.
func TestAddrIPv6(t *testing.T) {
	a := labtest.OpenNS(t, "ana6")
	b := labtest.OpenNS(t, "anb6")
	host, _, err := a.EnsureVeth(netops.VethOpts{HostName: "veth0", PeerName: "eth0", Peer: b})
	labtest.Must(t, err)
	nstest.WaitLinksUp(t, b.Path())
	ip := netip.MustParseAddr("2001:db8::10")
	old := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	nh := nstest.Netlink(t, b.Path())
	eth0, err := nh.LinkByName("eth0")
	labtest.Must(t, err)
	labtest.Must(t, nh.NeighSet(&netlink.Neigh{LinkIndex: eth0.Attrs().Index, Family: netlink.FAMILY_V6, State: netlink.NUD_STALE,
		IP: ip.AsSlice(), HardwareAddr: old}))
	mac := func() net.HardwareAddr {
		ns, err := b.Neighs("eth0")
		labtest.Must(t, err)
		for _, n := range ns {
			if n.IP == ip {
				return n.MAC
			}
		}
		return nil
	}
	if got := mac(); !bytes.Equal(got, old) {
		t.Fatalf("the neighbour entry for %s before: %v, want %s", ip, got, old)
	}
	labtest.Must(t, announce.Addr(a, "veth0", ip))
	var got net.HardwareAddr
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = mac(); bytes.Equal(got, host.MAC) {
			return
		}
	}
	t.Errorf("the neighbour entry for %s after the advertisement: %v, want the announcer's %s", ip, got, host.MAC)
}

// TestAddrInvalid: what is no address is refused, naming the link.
func TestAddrInvalid(t *testing.T) {
	h, err := netops.Open("")
	labtest.Must(t, err)
	defer h.Close()
	if err := announce.Addr(h, "eth0", netip.Addr{}); err == nil || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("Addr(invalid) = %v; want an error naming the link", err)
	}
}
