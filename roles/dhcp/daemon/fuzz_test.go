package daemon

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"
)

// FuzzACK: what a DHCP server on the pod's network sends (anyone there can
// answer) goes through the library's parser and the daemon's reading of it
// (bind, timers, leaseOf) without a panic, and the lease's address is an
// address. make fuzz runs it.
func FuzzACK(f *testing.F) {
	ack, err := dhcpv4.New(
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
		dhcpv4.WithYourIP(net.IPv4(10, 56, 0, 100)),
		dhcpv4.WithServerIP(net.IPv4(10, 56, 0, 1)),
		dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
		dhcpv4.WithRouter(net.IPv4(10, 56, 0, 1)),
		dhcpv4.WithDNS(net.IPv4(10, 56, 0, 53)),
		dhcpv4.WithLeaseTime(120),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 56, 0, 1))),
		dhcpv4.WithOption(dhcpv4.OptDomainName("lan.test")),
		dhcpv4.WithOption(dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: []string{"lan.test", "test"}})),
		dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(&dhcpv4.Route{
			Dest: &net.IPNet{IP: net.IPv4(192, 168, 56, 0), Mask: net.CIDRMask(24, 32)}, Router: net.IPv4(10, 56, 0, 254)})),
	)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ack.ToBytes())
	noMask, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithYourIP(net.IPv4(10, 0, 0, 2)))
	f.Add(noMask.ToBytes())
	now := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		ack, err := dhcpv4.FromBytes(data)
		if err != nil {
			return
		}
		rec := &lease.Lease{}
		bind(rec, ack, now)
		timers(ack, now)
		l := leaseOf(rec, ack)
		if _, err := netip.ParsePrefix(l.Address); err != nil {
			t.Fatalf("lease address %q of ACK %v: %v", l.Address, ack, err)
		}
		// the ACK the store keeps reads back (a restarted daemon adopts it)
		if _, err := dhcpv4.FromBytes(rec.Ack); err != nil {
			t.Fatalf("the stored ACK does not read back: %v", err)
		}
	})
}
