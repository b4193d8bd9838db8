package announce_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"

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

// TestAddrIPv6: an IPv6 address is refused with an error naming it.
func TestAddrIPv6(t *testing.T) {
	h, err := netops.Open("")
	labtest.Must(t, err)
	defer h.Close()
	ip := netip.MustParseAddr("2001:db8::10")
	if err := announce.Addr(h, "eth0", ip); !errors.Is(err, netops.ErrEgressIPv6) || !strings.Contains(err.Error(), ip.String()) {
		t.Errorf("Addr(%s) = %v; want an error naming it, wrapping ErrEgressIPv6", ip, err)
	}
}
