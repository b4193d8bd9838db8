package nstest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// Reachable opens a TCP connection from a process in the namespace at from
// to a listener at ip (port chosen by the kernel) in the namespace at to and
// reads the listener's greeting; it returns nil when that works and why not
// otherwise. The dial may take up to 10 s, long enough for TCP to resend its
// SYN (at 1, 3 and 7 s): a first packet lost while neighbour entries settle
// on a loaded machine is not a broken path.
func Reachable(t testing.TB, from, to string, ip netip.Addr) error {
	t.Helper()
	var ln net.Listener
	if err := Run(t, to, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		return err
	}); err != nil {
		return fmt.Errorf("listen at %s in %s: %w", ip, to, err)
	}
	defer ln.Close()
	go Greet(ln)
	err := Run(t, from, func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != "hi" {
			return fmt.Errorf("wrong greeting %q", buf)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("connect from %s to %s in %s: %w", from, ln.Addr(), to, err)
	}
	return nil
}

// Greet writes "hi" to every connection ln accepts and closes it, until ln
// is closed.
func Greet(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("hi"))
		c.Close()
	}
}
