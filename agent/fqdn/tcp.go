package fqdn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// serveTCP accepts the pods' TCP connections on l until it is closed.
func (p *Proxy) serveTCP(l *net.TCPListener) {
	defer p.wg.Done()
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.cfg.Log.Warn("DNS proxy: accept a TCP connection", "error", err)
			time.Sleep(10 * time.Millisecond) // out of descriptors: not a busy loop
			continue
		}
		pod := netip.MustParseAddrPort(c.RemoteAddr().String()).Addr().Unmap()
		if !p.acquire(pod, true) {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closing { // Close has closed the others already
			c.Close()
		}
		p.conns[c] = true
		p.mu.Unlock()
		go func() {
			defer p.release(pod, true)
			p.tcpConn(c, pod)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
			c.Close()
		}()
	}
}

// tcpConn answers the queries of one TCP connection of pod, one after the
// other (a pipelining client's next query waits in the socket), over one
// connection to the server, made at the first query Permit allows.
func (p *Proxy) tcpConn(c *net.TCPConn, pod netip.Addr) {
	server, err := origDst(c)
	if err != nil {
		p.cfg.Log.Warn("DNS proxy: where a TCP connection was going", "pod", pod, "error", err)
		return
	}
	var up *net.TCPConn
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	for {
		if err := c.SetReadDeadline(time.Now().Add(p.cfg.IdleTimeout)); err != nil {
			return
		}
		msg, err := readMsg(c, maxQuery)
		if err != nil {
			return
		}
		p.n.queries.Add(1)
		q, err := parseQuery(msg)
		out, done := p.badQuery(q, err)
		switch {
		case done && out == nil:
			return // not a query
		case done:
		case !p.acquire(pod, false):
			out = reply(q, dnsmessage.RCodeServerFailure, false)
		default:
			out = p.answer(pod, server, policymodel.TCP, q, func() ([]byte, error) {
				return p.exchangeTCP(&up, server, q, msg)
			})
			p.release(pod, false)
		}
		if out == nil {
			return
		}
		if err := c.SetWriteDeadline(time.Now().Add(p.cfg.Timeout)); err != nil {
			return
		}
		if err := writeMsg(c, out); err != nil {
			return
		}
	}
}

// exchangeTCP sends msg to server over *up (dialled when nil, and again
// once when a kept connection fails: the server may have closed it while
// it was idle) and returns its answer to q, within Timeout. A message
// that does not answer q ends the connection.
func (p *Proxy) exchangeTCP(up **net.TCPConn, server netip.AddrPort, q query, msg []byte) ([]byte, error) {
	for try := 0; ; try++ {
		fresh := *up == nil
		if fresh {
			d := net.Dialer{Timeout: p.cfg.Timeout}
			c, err := d.Dial("tcp", server.String())
			if err != nil {
				return nil, err
			}
			*up = c.(*net.TCPConn)
		}
		b, err := p.roundTrip(*up, msg)
		if err == nil && !isAnswerTo(b, q) {
			err = errMismatch
		}
		if err == nil {
			return b, nil
		}
		(*up).Close()
		*up = nil
		if fresh || try > 0 || errors.Is(err, errMismatch) || errors.Is(err, errDeadline) {
			return nil, err
		}
	}
}

var errDeadline = errors.New("no answer in time")

// roundTrip writes msg on c and reads one message back, before Timeout.
func (p *Proxy) roundTrip(c *net.TCPConn, msg []byte) ([]byte, error) {
	if err := c.SetDeadline(time.Now().Add(p.cfg.Timeout)); err != nil {
		return nil, err
	}
	if err := writeMsg(c, msg); err != nil {
		return nil, err
	}
	b, err := readMsg(c, 65535)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, fmt.Errorf("%w: %w", errDeadline, err)
	}
	return b, err
}

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/
// ip6_tables.h), the same number as IPv4's SO_ORIGINAL_DST; x/sys/unix
// names only the latter.
const ip6tSoOriginalDst = 80

// origDst returns where the pod's connection c was going before the DNS
// table DNATed it to the proxy: SO_ORIGINAL_DST (IPv4) or
// IP6T_SO_ORIGINAL_DST (IPv6), which read the connection's conntrack
// entry. A connection made to the proxy itself returns the proxy's own
// address (answer refuses it).
func origDst(c *net.TCPConn) (netip.AddrPort, error) {
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var dst netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if local.Addr().Unmap().Is4() {
			// struct sockaddr_in in the first 16 bytes: family, port
			// (network order), address.
			m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if err != nil {
				serr = err
				return
			}
			b := m.Multiaddr
			dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
			return
		}
		// struct sockaddr_in6 at the start of struct ip6_mtuinfo.
		m, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSoOriginalDst)
		if err != nil {
			serr = err
			return
		}
		var port [2]byte
		binary.NativeEndian.PutUint16(port[:], m.Addr.Port) // as the kernel stored it: network order
		dst = netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr), binary.BigEndian.Uint16(port[:]))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %s <- %s: %w", local, c.RemoteAddr(), err)
	}
	return dst, nil
}
