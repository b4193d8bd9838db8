package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"time"
)

// pingPongs is how many 1-byte round trips pingPong measures.
const pingPongs = 2000

// pingPong returns the median round trip, in µs, of a 1-byte request and a
// 1-byte answer over one TCP connection from the namespace cli to a
// listener at ip in srv (the sockets are made in their namespaces; the
// round trips run afterwards, on any thread).
func pingPong(cli, srv string, ip netip.Addr) (float64, error) {
	var ln net.Listener
	if err := runIn(srv, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		return err
	}); err != nil {
		return 0, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo
	}()
	var c net.Conn
	if err := runIn(cli, func() error {
		var err error
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		return err
	}); err != nil {
		return 0, err
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	buf := []byte{0}
	rtts := make([]time.Duration, 0, pingPongs)
	for i := range pingPongs + 100 {
		start := time.Now()
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, err
		}
		if !bytes.Equal(buf, []byte{byte(i)}) {
			return 0, fmt.Errorf("echo %d came back as %d", byte(i), buf[0])
		}
		if i >= 100 { // the first ones warm the path up
			rtts = append(rtts, time.Since(start))
		}
	}
	slices.Sort(rtts)
	return float64(rtts[len(rtts)/2].Nanoseconds()) / 1e3, nil
}

// lastLine returns the last non-empty line of b.
func lastLine(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(lines[len(lines)-1])
}
