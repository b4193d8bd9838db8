package nstest

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// What a pod that lies about its addresses sends, for the tests of the
// source address check: datagrams from any address, a gratuitous ARP and
// an unsolicited neighbour advertisement for an address of another.

// UDPSink is a UDP listener in a namespace that reports the source of every
// datagram it gets.
type UDPSink struct {
	At   netip.AddrPort
	from chan netip.Addr
}

// ListenUDP starts a UDPSink on addr (port chosen by the kernel) in the
// namespace at nsPath; it closes when the test ends.
func ListenUDP(t testing.TB, nsPath string, addr netip.Addr) *UDPSink {
	t.Helper()
	pc := listenIn(t, nsPath, func() (net.PacketConn, error) { return net.ListenPacket("udp", netip.AddrPortFrom(addr, 0).String()) })
	s := &UDPSink{At: netip.MustParseAddrPort(pc.LocalAddr().String()), from: make(chan netip.Addr, 64)}
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case s.from <- netip.MustParseAddrPort(from.String()).Addr().Unmap():
			default:
			}
		}
	}()
	return s
}

// SendFrom sends datagrams with source address src (any address: the
// socket is transparent) from the namespace at nsPath to s, one every
// 100 ms, until s has one from src or wait has passed; it reports whether
// s got one.
func SendFrom(t testing.TB, nsPath string, src netip.Addr, s *UDPSink, wait time.Duration) bool {
	t.Helper()
	return sendFromTo(t, nsPath, "", src, s.At, s, wait)
}

// SendFromTo is SendFrom to dst (at s's port), which may be another
// address of s's namespace than the one s listens on (s on :: gets
// them all); link-local addresses, src or dst, are those of the link
// ifname.
func SendFromTo(t testing.TB, nsPath, ifname string, src, dst netip.Addr, s *UDPSink, wait time.Duration) bool {
	t.Helper()
	return sendFromTo(t, nsPath, ifname, src, netip.AddrPortFrom(dst, s.At.Port()), s, wait)
}

func sendFromTo(t testing.TB, nsPath, ifname string, src netip.Addr, to netip.AddrPort, s *UDPSink, wait time.Duration) bool {
	t.Helper()
	var fd, zone int
	if err := Run(t, nsPath, func() error {
		if ifname != "" {
			ifi, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			zone = ifi.Index
		}
		fam, lvl, opt := unix.AF_INET, unix.SOL_IP, unix.IP_TRANSPARENT
		if src.Is6() {
			fam, lvl, opt = unix.AF_INET6, unix.SOL_IPV6, unix.IPV6_TRANSPARENT
		}
		var err error
		if fd, err = unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, lvl, opt, 1); err != nil {
			return fmt.Errorf("transparent socket: %w", err)
		}
		return unix.Bind(fd, sockaddr(netip.AddrPortFrom(src, 0), zoneOf(src, zone)))
	}); err != nil {
		t.Fatalf("socket from %s in %s: %v", src, nsPath, err)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		_ = unix.Sendto(fd, []byte("x"), 0, sockaddr(to, zoneOf(to.Addr(), zone)))
		select {
		case got := <-s.from:
			if got.WithZone("") == src {
				return true
			}
		case <-tick.C:
		}
	}
	return false
}

// zoneOf is zone for an IPv6 link-local address a, else 0.
func zoneOf(a netip.Addr, zone int) int {
	if a.Is6() && a.IsLinkLocalUnicast() {
		return zone
	}
	return 0
}

func sockaddr(ap netip.AddrPort, zone int) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port()), ZoneId: uint32(zone)}
}

// SendGratuitousARP broadcasts on ifname in the namespace at nsPath an ARP
// request that says ip is at ifname's MAC (sender and target ip): a
// neighbour that has an entry for ip takes the MAC.
func SendGratuitousARP(t testing.TB, nsPath, ifname string, ip netip.Addr) error {
	t.Helper()
	return SendARPRequest(t, nsPath, ifname, ip, ip)
}

// SendUnsolicitedNA sends from src (an address the namespace has) on
// ifname to all nodes a neighbour advertisement with the override flag
// that says target is at ifname's MAC.
func SendUnsolicitedNA(t testing.TB, nsPath, ifname string, src, target netip.Addr) error {
	t.Helper()
	return sendOn(t, nsPath, ifname, unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6, func(ifi *net.Interface, fd int) error {
		for _, o := range [][2]int{{unix.IPV6_MULTICAST_IF, ifi.Index}, {unix.IPV6_MULTICAST_HOPS, 255}, {unix.IPV6_UNICAST_HOPS, 255}} {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, o[0], o[1]); err != nil {
				return err
			}
		}
		if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(src, 0), 0)); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		t16 := target.As16()
		// Type 136, code 0, checksum (the kernel's), flags O, target,
		// the target link-layer address option.
		m := append([]byte{136, 0, 0, 0, 0x20, 0, 0, 0}, t16[:]...)
		m = append(append(m, 2, 1), ifi.HardwareAddr...)
		return unix.Sendto(fd, m, 0, sockaddr(netip.AddrPortFrom(netip.MustParseAddr("ff02::1"), 0), ifi.Index))
	})
}

// sendOn runs send in the namespace at nsPath with ifname's interface and
// a socket of domain, typ and proto, closed after.
func sendOn(t testing.TB, nsPath, ifname string, domain, typ, proto int, send func(ifi *net.Interface, fd int) error) error {
	t.Helper()
	return Run(t, nsPath, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return send(ifi, fd)
	})
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
