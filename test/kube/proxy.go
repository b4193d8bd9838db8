package kube

import (
	"cmp"
	"io"
	"net"
	"os"
	"sync"
	"testing"
)

// Cut is how a Proxy cuts its client off from the API server.
type Cut int

const (
	// Open forwards.
	Open Cut = iota
	// Reset closes every connection and every new one at once: the
	// client learns at once.
	Reset
	// Silent holds every connection open and forwards nothing either
	// way: the client learns nothing until its own timeouts.
	Silent
)

// Proxy forwards a client's TCP connections to the API server that Start
// started until cut (Set): a test cuts a running agent off from the API
// (a partition, not a death). Addr is where it listens; give the agent
// https://Addr as its API's URL.
type Proxy struct {
	Addr string
	mu   sync.Mutex
	how  Cut
	open map[net.Conn]bool
}

// NewProxy listens on a port of 127.0.0.1 until the test ends.
func NewProxy(t testing.TB) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), open: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.Set(Reset) })
	api := "127.0.0.1:" + cmp.Or(os.Getenv("KCP_API_PORT"), "16443")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			switch p.state() {
			case Reset:
				c.Close()
				continue
			case Silent:
				p.track(c)
				go io.Copy(io.Discard, c) // (read and dropped: the client's writes never block)
				continue
			}
			up, err := net.Dial("tcp", api)
			if err != nil {
				c.Close()
				continue
			}
			p.track(c, up)
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	return p
}

// pipe copies src to dst while the proxy forwards; once it is silent,
// what src sends is read and dropped.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.state() == Open {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if p.state() != Silent {
		dst.Close()
	}
}

func (p *Proxy) state() Cut {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.how
}

func (p *Proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.open[c] = true
	}
}

// Set cuts the client off (Reset, Silent) or lets it through again (Open:
// the connections held while silent are closed, so that it dials again).
func (p *Proxy) Set(how Cut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.how = how
	if how == Silent {
		return
	}
	for c := range p.open {
		c.Close()
		delete(p.open, c)
	}
}
