package fqdn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"

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
// connection to the server, made at the first query Permit allows. The
// server is where the pod's connection was going: the accepted socket's
// own address (the listener is transparent), with port 53.
func (p *Proxy) tcpConn(c *net.TCPConn, pod netip.Addr) {
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	server := netip.AddrPortFrom(local.Addr().Unmap(), dnsPort)
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
