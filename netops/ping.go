package netops

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoAnswer is wrapped by Ping's error when no echo reply came back in
// time.
var ErrNoAnswer = errors.New("no answer")

// pingInterval is the time between two echo requests of one Ping.
const pingInterval = 200 * time.Millisecond

// Ping sends ICMP (or ICMPv6) echo requests to dst from inside the Handle's
// namespace, one every 200ms, until one is answered or timeout passes, and
// returns the round-trip time of the answer. It uses a raw socket, so it
// needs CAP_NET_RAW (root), and no ping binary. An unanswered ping returns an
// error wrapping ErrNoAnswer; a destination the namespace has no route to
// returns the kernel's error (ENETUNREACH) at once.
func (h *Handle) Ping(dst netip.Addr, timeout time.Duration) (time.Duration, error) {
	return h.PingFrom(netip.Addr{}, dst, timeout)
}

// PingFrom is Ping with the echo requests sent from src (unset: the
// kernel's choice), so that the namespace's rules by source address pick
// the route (a pod whose routes source-based routing keeps in a table of
// their own).
func (h *Handle) PingFrom(src, dst netip.Addr, timeout time.Duration) (time.Duration, error) {
	if !dst.IsValid() {
		return 0, fmt.Errorf("ping: invalid address")
	}
	dst = dst.Unmap()
	domain, proto := unix.AF_INET, unix.IPPROTO_ICMP
	if dst.Is6() {
		domain, proto = unix.AF_INET6, unix.IPPROTO_ICMPV6
	}
	sa, err := h.pingSockaddr(dst)
	if err != nil {
		return 0, err
	}
	fd := -1
	// A socket belongs to the namespace it was created in, whichever thread
	// uses it later.
	err = h.inNS(func() error {
		var err error
		fd, err = unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, proto)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ping %s from %s: open raw socket: %w", dst, h.where(), err)
	}
	defer unix.Close(fd)
	if src.IsValid() {
		var bsa unix.Sockaddr = &unix.SockaddrInet4{Addr: src.Unmap().As4()}
		if dst.Is6() {
			bsa = &unix.SockaddrInet6{Addr: src.As16()}
		}
		if err := unix.Bind(fd, bsa); err != nil {
			return 0, fmt.Errorf("ping %s from %s (source %s): %w", dst, h.where(), src, classify(err))
		}
	}

	id := uint16(rand.Uint32())
	start := time.Now()
	deadline := start.Add(timeout)
	sent := map[uint16]time.Time{}
	buf := make([]byte, 1500)
	for seq := uint16(1); ; seq++ {
		now := time.Now()
		if !now.Before(deadline) {
			return 0, fmt.Errorf("ping %s from %s: %w in %s (%d echo requests sent)", dst, h.where(), ErrNoAnswer, timeout, len(sent))
		}
		if err := unix.Sendto(fd, echoRequest(dst.Is6(), id, seq), 0, sa); err != nil {
			return 0, fmt.Errorf("ping %s from %s: %w", dst, h.where(), classify(err))
		}
		sent[seq] = now
		until := now.Add(pingInterval)
		if until.After(deadline) {
			until = deadline
		}
		for {
			wait := time.Until(until)
			if wait <= 0 {
				break
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(wait.Milliseconds())+1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("ping %s from %s: %w", dst, h.where(), err)
			}
			if n == 0 {
				break
			}
			for {
				m, from, err := unix.Recvfrom(fd, buf, 0)
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					break
				}
				if err != nil {
					return 0, fmt.Errorf("ping %s from %s: %w", dst, h.where(), classify(err))
				}
				if !sameAddr(from, dst) {
					continue
				}
				if s, ok := echoReplySeq(dst.Is6(), buf[:m], id); ok {
					if at, ok := sent[s]; ok {
						return time.Since(at), nil
					}
				}
			}
		}
	}
}

// pingSockaddr is the socket address of dst; a zone names an interface of
// the Handle's namespace.
func (h *Handle) pingSockaddr(dst netip.Addr) (unix.Sockaddr, error) {
	if dst.Is4() {
		return &unix.SockaddrInet4{Addr: dst.As4()}, nil
	}
	sa := &unix.SockaddrInet6{Addr: dst.As16()}
	if z := dst.Zone(); z != "" {
		idx, _, err := h.linkIndex(z)
		if err != nil {
			return nil, fmt.Errorf("ping %s: zone %q: %w", dst, z, classify(err))
		}
		sa.ZoneId = uint32(idx)
	}
	return sa, nil
}

// echoRequest builds an ICMP echo request. For ICMPv6 the kernel fills in
// the checksum.
func echoRequest(v6 bool, id, seq uint16) []byte {
	b := make([]byte, 8+16)
	b[0] = 8 // ICMP echo request
	if v6 {
		b[0] = 128
	}
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	copy(b[8:], "cnibox doctor   ")
	if !v6 {
		binary.BigEndian.PutUint16(b[2:], icmpChecksum(b))
	}
	return b
}

// echoReplySeq returns the sequence number of an echo reply with the given
// id. An IPv4 raw socket delivers the IP header too; an IPv6 one does not.
func echoReplySeq(v6 bool, b []byte, id uint16) (uint16, bool) {
	want := byte(0)
	if v6 {
		want = 129
	} else {
		if len(b) < 20 {
			return 0, false
		}
		ihl := int(b[0]&0x0f) * 4
		if len(b) < ihl {
			return 0, false
		}
		b = b[ihl:]
	}
	if len(b) < 8 || b[0] != want || b[1] != 0 || binary.BigEndian.Uint16(b[4:]) != id {
		return 0, false
	}
	return binary.BigEndian.Uint16(b[6:]), true
}

func sameAddr(sa unix.Sockaddr, a netip.Addr) bool {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Is4() && netip.AddrFrom4(s.Addr) == a
	case *unix.SockaddrInet6:
		return a.Is6() && netip.AddrFrom16(s.Addr) == a.WithZone("")
	}
	return false
}

// icmpChecksum is the Internet checksum (RFC 1071) of b.
func icmpChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
