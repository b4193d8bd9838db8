package nstest

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// SendARPRequest broadcasts on ifname in the namespace at nsPath an ARP
// request for target that names sender (any address) as the asker's, at
// ifname's MAC: what a pod that lies about its address sends to resolve
// its gateway.
func SendARPRequest(t testing.TB, nsPath, ifname string, sender, target netip.Addr) error {
	t.Helper()
	proto := htons(unix.ETH_P_ARP)
	return sendOn(t, nsPath, ifname, unix.AF_PACKET, unix.SOCK_RAW, int(proto), func(ifi *net.Interface, fd int) error {
		bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		s4, t4 := sender.As4(), target.As4()
		f := append(append(append([]byte{}, bcast...), ifi.HardwareAddr...), 0x08, 0x06)
		f = append(f, 0, 1, 0x08, 0x00, 6, 4, 0, 1) // Ethernet, IPv4, request
		f = append(append(f, ifi.HardwareAddr...), s4[:]...)
		f = append(append(f, make([]byte, 6)...), t4[:]...)
		var ll [8]byte
		copy(ll[:], bcast)
		return unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: proto, Halen: 6, Addr: ll})
	})
}
