package fqdn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The proxy's sockets are transparent (IP_TRANSPARENT, IPV6_TRANSPARENT):
// netops/nft's DNS table leaves a diverted query's destination as it is
// (the server, or the endpoint kube-proxy picked for a ClusterIP) and
// netops.MarkLocal's routing delivers it to the node, so the proxy's
// listeners take packets and connections for addresses that are not the
// node's, and answer from them: a TCP connection's accepted socket has
// the server's address as its own, a UDP answer leaves from the server's
// address (IP_PKTINFO, IPV6_PKTINFO), which the kernel allows a
// transparent socket. The UDP listener learns each datagram's destination
// from IP_ORIGDSTADDR (IPV6_ORIGDSTADDR). The table rewrites the port
// both ways (53 in, the proxy's port; the proxy's port out, 53), so the
// answers are the replies of the pods' own flows in conntrack's eyes.
// Setting the options takes CAP_NET_ADMIN.

// transparent makes the proxy's listeners.
var transparent = net.ListenConfig{Control: func(network, _ string, rc syscall.RawConn) error {
	level, transp, orig := unix.SOL_IP, unix.IP_TRANSPARENT, unix.IP_RECVORIGDSTADDR
	if strings.HasSuffix(network, "6") {
		level, transp, orig = unix.SOL_IPV6, unix.IPV6_TRANSPARENT, unix.IPV6_RECVORIGDSTADDR
	}
	var serr error
	err := rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), level, transp, 1); serr != nil {
			serr = fmt.Errorf("set IP(V6)_TRANSPARENT (needs CAP_NET_ADMIN): %w", serr)
			return
		}
		if strings.HasPrefix(network, "udp") {
			if serr = unix.SetsockoptInt(int(fd), level, orig, 1); serr != nil {
				serr = fmt.Errorf("set IP(V6)_RECVORIGDSTADDR: %w", serr)
			}
		}
	})
	return errors.Join(err, serr)
}}

// oobSize holds a datagram's IP(V6)_ORIGDSTADDR message.
var oobSize = unix.CmsgSpace(unix.SizeofSockaddrInet6)

// errNoOrigDst: a datagram without its destination (a truncated or
// missing control message).
var errNoOrigDst = errors.New("no IP(V6)_ORIGDSTADDR message")

// origDst returns the destination address of a datagram read with its
// control messages oob (flags: ReadMsgUDP's).
func origDst(oob []byte, flags int) (netip.Addr, error) {
	if flags&unix.MSG_CTRUNC != 0 {
		return netip.Addr{}, errNoOrigDst
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", errNoOrigDst, err)
	}
	for i := range msgs {
		sa, err := unix.ParseOrigDstAddr(&msgs[i])
		if err != nil {
			continue
		}
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			return netip.AddrFrom4(sa.Addr), nil
		case *unix.SockaddrInet6:
			return netip.AddrFrom16(sa.Addr).Unmap(), nil
		}
	}
	return netip.Addr{}, errNoOrigDst
}

// pktInfo is the control message that sends a datagram from src.
func pktInfo(src netip.Addr) []byte {
	if src.Is4() {
		return unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: src.As4()})
	}
	return unix.PktInfo6(&unix.Inet6Pktinfo{Addr: src.As16()})
}
