package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// serveRR serves rrPort and rrClosedPort in the namespace at ns: each
// connection echoes what it reads.
func serveRR(ns string) error {
	return netops.InNetns(ns, func() error {
		for _, port := range []int{rrPort, rrClosedPort} {
			ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						io.Copy(c, c)
					}()
				}
			}()
		}
		return nil
	})
}

// dialFrom connects from the namespace at ns.
func dialFrom(ns string, to netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netops.InNetns(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp", to.String(), timeout)
		return err
	})
	return c, err
}

// tcpRR is transactions per second of one byte each way on one connection
// for d: the median of runs.
func tcpRR(ns string, to netip.AddrPort, d time.Duration, runs int) (float64, error) {
	var rates []float64
	for range runs {
		c, err := dialFrom(ns, to, 3*time.Second)
		if err != nil {
			return 0, err
		}
		buf := []byte{1}
		k := 0
		end := time.Now().Add(d)
		t0 := time.Now()
		for ; time.Now().Before(end); k++ {
			if _, err := c.Write(buf); err != nil {
				c.Close()
				return 0, err
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				c.Close()
				return 0, err
			}
		}
		rates = append(rates, float64(k)/time.Since(t0).Seconds())
		c.Close()
	}
	slices.Sort(rates)
	return rates[len(rates)/2], nil
}

// rr measures the request/response rate between node 0's two pods, and
// whether a port no policy allows is closed between them.
func (n *node) rr(o *options) (rate float64, closed bool, err error) {
	from := filepath.Join(netops.NamedNSDir, n.pods[0])
	rate, err = tcpRR(from, netip.AddrPortFrom(rrAddrs[1], rrPort), o.rrDuration, o.rrRuns)
	if err != nil {
		return 0, false, err
	}
	c, err := dialFrom(from, netip.AddrPortFrom(rrAddrs[1], rrClosedPort), time.Second)
	if err != nil {
		return rate, true, nil
	}
	c.Close()
	return rate, false, nil
}

// crr is new connections a second from node 0's first pod to its second
// (connect, one byte each way, close) for o.rrDuration: the median of
// o.rrRuns runs. Each connection's first packet is where the policies
// (and the flow log) do their work.
func (n *node) crr(o *options) (float64, error) {
	from := filepath.Join(netops.NamedNSDir, n.pods[0])
	to := netip.AddrPortFrom(rrAddrs[1], rrPort)
	var rates []float64
	for range o.rrRuns {
		k := 0
		t0 := time.Now()
		err := netops.InNetns(from, func() error {
			buf := []byte{1}
			for end := t0.Add(o.rrDuration); time.Now().Before(end); k++ {
				c, err := net.DialTimeout("tcp", to.String(), 3*time.Second)
				if err != nil {
					return err
				}
				// Closed with a reset: no TIME_WAIT, so the client's
				// ports last the runs.
				c.(*net.TCPConn).SetLinger(0)
				_, err = c.Write(buf)
				if err == nil {
					_, err = io.ReadFull(c, buf)
				}
				c.Close()
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		rates = append(rates, float64(k)/time.Since(t0).Seconds())
	}
	slices.Sort(rates)
	return rates[len(rates)/2], nil
}

// countLines is the number of lines of the file at path (0 if it is not
// there).
func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}
