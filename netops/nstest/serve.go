package nstest

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// Serve listens on addr inside the namespace at nsPath and answers every
// connection with the remote address it sees (read it with SeenFrom). The
// listener closes when the test ends.
func Serve(t testing.TB, nsPath string, addr netip.Addr) netip.AddrPort {
	t.Helper()
	ln := listenIn(t, nsPath, func() (net.Listener, error) { return net.Listen("tcp", netip.AddrPortFrom(addr, 0).String()) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().String())
			c.Close()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// listenIn opens a listener with listen in the namespace at nsPath (the
// test fails when it cannot) and closes it when the test ends.
func listenIn[L io.Closer](t testing.TB, nsPath string, listen func() (L, error)) L {
	t.Helper()
	var l L
	if err := Run(t, nsPath, func() error {
		var err error
		l, err = listen()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// SeenFrom connects from inside nsPath to a server of Serve and returns the
// source address the server saw.
func SeenFrom(t testing.TB, nsPath string, to netip.AddrPort) netip.Addr {
	t.Helper()
	var c net.Conn
	err := Run(t, nsPath, func() error {
		var err error
		c, err = net.DialTimeout("tcp", to.String(), 10*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("connect from %s to %s: %v", nsPath, to, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := netip.ParseAddrPort(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return ap.Addr().Unmap()
}

// ServeEcho listens on ap inside the namespace at nsPath and copies back
// what each connection sends (discard: reads it and sends nothing), until
// the test ends.
func ServeEcho(t testing.TB, nsPath string, ap netip.AddrPort, discard bool) {
	t.Helper()
	ln := listenIn(t, nsPath, func() (net.Listener, error) { return net.Listen("tcp", ap.String()) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if discard {
					_, _ = io.Copy(io.Discard, c)
				} else {
					_, _ = io.Copy(c, c)
				}
			}()
		}
	}()
}
