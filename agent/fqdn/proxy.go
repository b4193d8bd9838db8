package fqdn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Config is the proxy's: where it listens, whom it asks, and its bounds.
// Zero bounds take the defaults (DefaultConfig's values).
type Config struct {
	// Port4 and Port6 are the proxy's ports for IPv4 and IPv6, UDP and
	// TCP alike, on every address of the node, where netops/nft's DNS
	// table sends the pods' DNS (DNSRedirect's Port4 and Port6) with its
	// destination kept; 0: that family is not served. At least one.
	Port4, Port6 uint16

	// Permit reports whether pod may send DNS to server over proto: the
	// pod's own egress policy, as if the proxy were not there. server is
	// the query's destination once kube-proxy's DNAT is done: for a
	// Service's ClusterIP, the endpoint kube-proxy picked, as the kernel
	// sees it (the policy table judged this very connection of the pod's
	// on the input hook before the proxy read it; Permit is a second
	// look, from the policy model). A query it refuses is answered
	// REFUSED and never leaves the node: the proxy is no way around
	// policy. Required.
	Permit func(pod netip.Addr, server netip.AddrPort, proto policymodel.Protocol) bool

	// Learn is told, for each answer that holds addresses, the query
	// name and every CNAME on the chain to them (canonical: lower case, no
	// trailing dot) and the addresses with their TTLs (within MinTTL and
	// MaxTTL); the pod gets the answer only after it returns, so its rules
	// are in the kernel before the pod can connect. An error replaces the
	// answer with SERVFAIL. Required; called from many goroutines at once.
	Learn func(pod netip.Addr, names []string, addrs []LearnedAddr) error

	// MinTTL (default 5 s) is the least time an address is learned for:
	// an answer's TTL of 0 or 1 (load balancers send them) still leaves
	// the pod time to connect, retransmit a SYN (1 s, then 3 s) and fall
	// back to its other family. MaxTTL (default 1 h, CoreDNS's cache's
	// cap too) is the most: an address stays allowed no longer after the
	// name moved; records above it reach the pod lowered to it, so the
	// pod never caches an address longer than it is allowed.
	MinTTL, MaxTTL time.Duration

	// MaxPerPod (default 64) bounds one pod's queries under way, UDP and
	// TCP together: a stub resolver has two at a time per lookup (A and
	// AAAA), a busy pod a few dozen; past the bound a UDP query is
	// dropped (the pod resends) and a TCP one gets SERVFAIL. MaxOutstanding
	// (default 1024) bounds all pods' queries and TCP connections
	// together: each holds a goroutine, a socket and a buffer.
	MaxPerPod, MaxOutstanding int
	// MaxTCPPerPod (default 16) bounds one pod's TCP connections.
	MaxTCPPerPod int

	// MaxUDPAnswer (default 4096, the largest EDNS buffer resolvers
	// advertise) bounds a UDP answer: a larger one reaches the pod as an
	// empty answer with TC set, and the pod asks again over TCP, where
	// DNS's own 64 KiB bound holds. MaxAddrs (default 256) bounds the
	// addresses of one answer: a server that sends more gets the pod
	// SERVFAIL, so that every address a pod is given is learned.
	MaxUDPAnswer, MaxAddrs int

	// Timeout (default 5 s, what stub resolvers wait) bounds the wait for
	// a server's answer, and writing to a pod over TCP. IdleTimeout (default 10 s)
	// closes a pod's TCP connection that sends no query.
	Timeout, IdleTimeout time.Duration

	// Log gets what goes wrong (nil: nothing is logged).
	Log *slog.Logger
}

// DefaultConfig holds the default bounds (the comments of Config say why).
var DefaultConfig = Config{
	MinTTL: 5 * time.Second, MaxTTL: time.Hour,
	MaxPerPod: 64, MaxOutstanding: 1024, MaxTCPPerPod: 16,
	MaxUDPAnswer: 4096, MaxAddrs: 256,
	Timeout: 5 * time.Second, IdleTimeout: 10 * time.Second,
}

// maxQuery bounds a pod's query: one question and EDNS fit in a few
// hundred bytes.
const maxQuery = 4096

// dnsPort is the port the DNS table takes the pods' DNS from (and gives
// back to the proxy's answers): the server's port of every query.
const dnsPort = 53

// Stats are the proxy's counts since Listen.
type Stats struct {
	Queries   uint64 // queries read from pods
	Forwarded uint64 // sent to their server
	Refused   uint64 // refused by Permit
	Dropped   uint64 // over a bound (UDP: dropped; TCP: SERVFAIL or the connection closed), or a datagram without its destination
	Failed    uint64 // answered SERVFAIL: no answer in time, one that lies, Learn failed
	Truncated uint64 // answered TC: the UDP answer was over MaxUDPAnswer
	Learned   uint64 // Learn calls that succeeded
}

// Proxy is a running DNS proxy (Listen).
type Proxy struct {
	cfg Config
	udp []*net.UDPConn
	tcp []*net.TCPListener

	mu      sync.Mutex
	load    map[netip.Addr]*podLoad
	total   int
	conns   map[*net.TCPConn]bool
	closing bool
	wg      sync.WaitGroup

	n struct{ queries, forwarded, refused, dropped, failed, truncated, learned atomic.Uint64 }
}

// podLoad is what one pod holds of the proxy.
type podLoad struct{ queries, conns int }

// Listen validates cfg, opens the proxy's transparent UDP and TCP
// sockets (transparent.go) on its ports in the calling thread's network
// namespace and serves until Close. It needs CAP_NET_ADMIN.
func Listen(cfg Config) (*Proxy, error) {
	cfg = withDefaults(cfg)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, load: map[netip.Addr]*podLoad{}, conns: map[*net.TCPConn]bool{}}
	for _, fam := range []struct {
		ipv  string
		port uint16
	}{{"4", cfg.Port4}, {"6", cfg.Port6}} {
		if fam.port == 0 {
			continue
		}
		addr := fmt.Sprintf(":%d", fam.port)
		u, err := transparent.ListenPacket(context.Background(), "udp"+fam.ipv, addr)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("DNS proxy: listen on UDP port %d (IPv%s): %w", fam.port, fam.ipv, err)
		}
		p.udp = append(p.udp, u.(*net.UDPConn))
		t, err := transparent.Listen(context.Background(), "tcp"+fam.ipv, addr)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("DNS proxy: listen on TCP port %d (IPv%s): %w", fam.port, fam.ipv, err)
		}
		p.tcp = append(p.tcp, t.(*net.TCPListener))
	}
	for _, u := range p.udp {
		p.wg.Add(1)
		go p.serveUDP(u)
	}
	for _, t := range p.tcp {
		p.wg.Add(1)
		go p.serveTCP(t)
	}
	return p, nil
}

func withDefaults(c Config) Config {
	d := DefaultConfig
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setD(&c.MinTTL, d.MinTTL)
	setD(&c.MaxTTL, d.MaxTTL)
	set(&c.MaxPerPod, d.MaxPerPod)
	set(&c.MaxOutstanding, d.MaxOutstanding)
	set(&c.MaxTCPPerPod, d.MaxTCPPerPod)
	set(&c.MaxUDPAnswer, d.MaxUDPAnswer)
	set(&c.MaxAddrs, d.MaxAddrs)
	setD(&c.Timeout, d.Timeout)
	setD(&c.IdleTimeout, d.IdleTimeout)
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) check() error {
	switch {
	case c.Permit == nil || c.Learn == nil:
		return errors.New("DNS proxy: Permit and Learn are required")
	case c.Port4 == 0 && c.Port6 == 0:
		return errors.New("DNS proxy: no port to listen on (Port4, Port6)")
	case c.MinTTL > c.MaxTTL:
		return fmt.Errorf("DNS proxy: MinTTL %v above MaxTTL %v", c.MinTTL, c.MaxTTL)
	case c.MaxUDPAnswer < 512 || c.MaxUDPAnswer > 65535:
		return fmt.Errorf("DNS proxy: MaxUDPAnswer %d: not within 512 and 65535", c.MaxUDPAnswer)
	}
	return nil
}

// Close stops the proxy: its sockets close, and the queries under way end
// (within Timeout) before it returns.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closing = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	for _, u := range p.udp {
		u.Close()
	}
	for _, t := range p.tcp {
		t.Close()
	}
	p.wg.Wait()
	return nil
}

// Stats returns the proxy's counts.
func (p *Proxy) Stats() Stats {
	return Stats{
		Queries: p.n.queries.Load(), Forwarded: p.n.forwarded.Load(), Refused: p.n.refused.Load(),
		Dropped: p.n.dropped.Load(), Failed: p.n.failed.Load(), Truncated: p.n.truncated.Load(), Learned: p.n.learned.Load(),
	}
}

// acquire takes one of pod's queries (conn false) or TCP connections
// (conn true), or reports that a bound forbids it.
func (p *Proxy) acquire(pod netip.Addr, conn bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.load[pod]
	if l == nil {
		l = &podLoad{}
		p.load[pod] = l
	}
	switch {
	case p.closing, p.total >= p.cfg.MaxOutstanding,
		!conn && l.queries >= p.cfg.MaxPerPod,
		conn && l.conns >= p.cfg.MaxTCPPerPod:
		if l.queries == 0 && l.conns == 0 {
			delete(p.load, pod)
		}
		p.n.dropped.Add(1)
		return false
	}
	if conn {
		l.conns++
	} else {
		l.queries++
	}
	p.total++
	p.wg.Add(1)
	return true
}

// release gives back what acquire took.
func (p *Proxy) release(pod netip.Addr, conn bool) {
	p.mu.Lock()
	l := p.load[pod]
	if conn {
		l.conns--
	} else {
		l.queries--
	}
	if l.queries == 0 && l.conns == 0 {
		delete(p.load, pod)
	}
	p.total--
	p.mu.Unlock()
	p.wg.Done()
}

// serveUDP reads queries from u until it is closed; each one that its
// pod's bounds allow is answered by a goroutine of its own, from the
// address the pod sent it to (its server: the answer is the reply of the
// pod's own flow, which conntrack un-NATs to the ClusterIP the pod asked).
func (p *Proxy) serveUDP(u *net.UDPConn) {
	defer p.wg.Done()
	buf, oob := make([]byte, maxQuery+1), make([]byte, oobSize)
	for {
		n, oobn, flags, from, err := u.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.cfg.Log.Warn("DNS proxy: read a UDP query", "error", err)
			continue
		}
		p.n.queries.Add(1)
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		dst, err := origDst(oob[:oobn], flags)
		if err != nil {
			p.cfg.Log.Warn("DNS proxy: where a UDP query was going", "pod", from, "error", err)
			p.n.dropped.Add(1)
			continue
		}
		if n > maxQuery {
			p.n.dropped.Add(1)
			continue
		}
		if !p.acquire(from.Addr(), false) {
			continue
		}
		msg := append([]byte(nil), buf[:n]...)
		server := netip.AddrPortFrom(dst, dnsPort)
		go func() {
			defer p.release(from.Addr(), false)
			if out := p.udpQuery(server, from, msg); out != nil {
				if _, _, err := u.WriteMsgUDPAddrPort(out, pktInfo(dst), from); err != nil {
					p.cfg.Log.Debug("DNS proxy: answer a pod over UDP", "pod", from, "server", server, "error", err)
				}
			}
		}()
	}
}

// udpQuery answers one UDP query of the pod at from to server: what to
// send back (nil: nothing).
func (p *Proxy) udpQuery(server, from netip.AddrPort, msg []byte) []byte {
	q, err := parseQuery(msg)
	if out, done := p.badQuery(q, err); done {
		return out
	}
	return p.answer(from.Addr(), server, policymodel.UDP, q, func() ([]byte, error) {
		return p.exchangeUDP(server, q, msg)
	})
}

// badQuery answers what parseQuery refused (done true), or nothing.
func (p *Proxy) badQuery(q query, err error) (out []byte, done bool) {
	switch {
	case err == nil:
		return nil, false
	case errors.Is(err, errOpcode):
		return reply(q, dnsmessage.RCodeNotImplemented, false), true
	case errors.Is(err, errQuestion):
		return reply(q, dnsmessage.RCodeFormatError, false), true
	}
	return nil, true // not a query: dropped
}

// answer decides a pod's query to server: refused unless Permit allows
// it, else exchange's answer once Learn has what it holds; SERVFAIL when
// anything fails.
func (p *Proxy) answer(pod netip.Addr, server netip.AddrPort, proto policymodel.Protocol, q query, exchange func() ([]byte, error)) []byte {
	if !p.cfg.Permit(pod, server, proto) {
		p.n.refused.Add(1)
		return reply(q, dnsmessage.RCodeRefused, false)
	}
	p.n.forwarded.Add(1)
	raw, err := exchange()
	if errors.Is(err, errTooBig) {
		p.n.truncated.Add(1)
		return reply(q, dnsmessage.RCodeSuccess, true)
	}
	fail := func(what string, err error) []byte {
		p.cfg.Log.Info("DNS proxy: "+what, "pod", pod, "server", server, "proto", proto, "name", q.name, "error", err)
		p.n.failed.Add(1)
		return reply(q, dnsmessage.RCodeServerFailure, false)
	}
	if err != nil {
		return fail("no answer", err)
	}
	a, err := parseAnswer(raw, q, p.cfg.MaxAddrs, p.cfg.MaxTTL)
	if err != nil {
		return fail("answer refused", err)
	}
	if len(a.addrs) > 0 {
		for i := range a.addrs {
			a.addrs[i].TTL = min(max(a.addrs[i].TTL, p.cfg.MinTTL), p.cfg.MaxTTL)
		}
		if err := p.cfg.Learn(pod, a.names, a.addrs); err != nil {
			return fail("learn the answer", err)
		}
		p.n.learned.Add(1)
	}
	if a.overTTL {
		if raw, err = capTTLs(raw, p.cfg.MaxTTL); err != nil {
			return fail("answer refused", err)
		}
	}
	return raw
}

// errTooBig: a UDP answer over MaxUDPAnswer.
var errTooBig = errors.New("UDP answer larger than the proxy takes")

// exchangeUDP sends msg to server from a socket of its own (a port of
// the kernel's choosing, connected: only the server's datagrams reach it)
// and returns the first datagram that answers q (others, forged or stray,
// are skipped) before Timeout.
func (p *Proxy) exchangeUDP(server netip.AddrPort, q query, msg []byte) ([]byte, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(p.cfg.Timeout)); err != nil {
		return nil, err
	}
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, p.cfg.MaxUDPAnswer+1)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n > p.cfg.MaxUDPAnswer {
			return nil, errTooBig
		}
		if isAnswerTo(buf[:n], q) {
			return buf[:n], nil
		}
	}
}

// readMsg reads one length-prefixed DNS message of at most limit bytes
// from r (RFC 1035 4.2.2).
func readMsg(r io.Reader, limit int) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := int(l[0])<<8 | int(l[1])
	if n > limit {
		return nil, fmt.Errorf("DNS message of %d bytes, over %d", n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// writeMsg writes msg with its length prefix, in one write.
func writeMsg(w io.Writer, msg []byte) error {
	b := make([]byte, 2+len(msg))
	b[0], b[1] = byte(len(msg)>>8), byte(len(msg))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}
