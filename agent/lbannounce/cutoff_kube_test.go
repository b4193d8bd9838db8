//go:build kube

package lbannounce

import (
	"cmp"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// cut is how an apiProxy cuts its agent off from the API server.
type cut int

const (
	open   cut = iota // forwarding
	reset             // every connection closed, every new one closed at once: the client learns at once
	silent            // every connection held open, nothing forwarded either way: the client learns nothing until its own timeouts
)

// apiProxy forwards an agent's TCP connections to the API server until
// cut (setCut): the agent's process keeps running, cut off from the API.
type apiProxy struct {
	addr string
	mu   sync.Mutex
	how  cut
	open map[net.Conn]bool
}

func newAPIProxy(t *testing.T) *apiProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &apiProxy{addr: ln.Addr().String(), open: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setCut(reset) })
	api := "127.0.0.1:" + cmp.Or(os.Getenv("KCP_API_PORT"), "16443")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			switch p.state() {
			case reset:
				c.Close()
				continue
			case silent:
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
func (p *apiProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.state() == open {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if p.state() != silent {
		dst.Close()
	}
}

func (p *apiProxy) state() cut {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.how
}

func (p *apiProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.open[c] = true
	}
}

// setCut cuts the agent off (reset, silent) or lets it through again
// (open: the connections held while silent are closed, so that the agent
// dials again).
func (p *apiProxy) setCut(how cut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.how = how
	if how == silent {
		return
	}
	for c := range p.open {
		c.Close()
		delete(p.open, c)
	}
}

// TestKubeLBAnnounceCutOff: the announcer's agent cut off from the API
// server while its process keeps running and its uplink stays up (a
// partition, not a death), twice: once with its connections reset and
// refused, once held open with nothing forwarded (its requests hang). Each
// time another node takes the address over and the client reaches it
// there, and the cut-off node's kernel has dropped the address before or
// when the other took it: never two holders at any observed moment (the
// three kernels and ARP from the LAN every 10 ms). Once the partition
// heals, the cut-off agent sees the new announcer and leaves it be.
func TestKubeLBAnnounceCutOff(t *testing.T) {
	l := startLab(t, true)
	stop := l.watch(t, addrA)
	defer stop()
	l.service(t, "a", addrA, corev1.ServiceExternalTrafficPolicyCluster)
	holder := l.waitHolder(t, addrA, "", "n1", "n2")
	for _, how := range []cut{reset, silent} {
		old := holder
		t0 := time.Now()
		old.proxy.setCut(how)
		dropped := make(chan time.Duration, 1)
		go func() { // when the cut-off node's kernel lost the address
			for time.Since(t0) < time.Minute {
				if !slices.Contains(l.holders(t, addrA), old.name) {
					dropped <- time.Since(t0)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			dropped <- -1
		}()
		holder = l.waitHolder(t, addrA, old.name, "n1", "n2")
		took := time.Since(t0)
		d := <-dropped
		if d < 0 {
			t.Fatalf("cut %d: %s still holds %s a minute after its cut", how, old.name, addrA)
		}
		t.Logf("cut %d (1 reset, 2 silent): %s cut off from the API; its kernel dropped %s %v after, %s holds it and answers %v after", how, old.name, addrA, d, holder.name, took)
		select {
		case <-old.done:
			t.Fatalf("%s's agent ended while cut off: a cut-off is no death", old.name)
		default:
		}
		old.proxy.setCut(open)
		l.waitRecorded(t, old, addrA, holder.name)
		if h := l.holders(t, addrA); !slices.Equal(h, []string{holder.name}) {
			t.Fatalf("after %s's partition healed: holders %v, want %s", old.name, h, holder.name)
		}
	}
}
