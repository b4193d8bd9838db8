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
	return ReachableWithin(t, from, to, ip, 10*time.Second)
}

// DenyWait is how long a probe that a drop should keep away waits for its
// connection (ReachableWithin): between namespaces of one machine a
// connection answers in microseconds, and TCP resends a SYN lost while
// neighbour entries settle after 1 s. A probe expected to pass waits the
// 10 s of Reachable: only an answer ends it early, while a dropped SYN
// gives nothing to wait for but a deadline.
const DenyWait = 1500 * time.Millisecond

// Probe is Reachable for a test that expects the connection (want), and
// ReachableWithin DenyWait for one that expects a drop to keep it away.
func Probe(t testing.TB, from, to string, ip netip.Addr, want bool) error {
	t.Helper()
	if want {
		return Reachable(t, from, to, ip)
	}
	return ReachableWithin(t, from, to, ip, DenyWait)
}

// ReachableWithin is Reachable with the dial bounded by wait.
func ReachableWithin(t testing.TB, from, to string, ip netip.Addr, wait time.Duration) error {
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
		c, err := net.DialTimeout("tcp", ln.Addr().String(), wait)
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
