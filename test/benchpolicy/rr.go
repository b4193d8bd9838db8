package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cnibox/cnibox/internal/logrotate"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/flood"
	"github.com/cnibox/cnibox/test/internal/netload"
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

// tcpRR is transactions per second of one byte each way on one connection
// for d: the median of runs.
func tcpRR(ns string, to netip.AddrPort, d time.Duration, runs int) (float64, error) {
	var rates []float64
	for range runs {
		c, err := netload.DialFrom(ns, to, 3*time.Second)
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
	c, err := netload.DialFrom(from, netip.AddrPortFrom(rrAddrs[1], rrClosedPort), time.Second)
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

// floodLog floods node 0's second pod from its first with o.floodRate new
// connections a second to each of rrPort (allowed: logged by its rule)
// and rrClosedPort (refused: logged by the isolation) for o.rrDuration, SYNs
// only (test/internal/flood), and says how many connections a second were
// sent and how many records a second the flow log wrote of them, counted
// until it stops growing: logged connections a node takes before any rate
// limit (the side runs with none). Each log rule passes at most 10,000
// packets a second to the agent (docs/policy.md), so two rules cap it at
// 20,000.
func (n *node) floodLog(o *options) (offered, logged float64, err error) {
	from := filepath.Join(netops.NamedNSDir, n.pods[0])
	log := flowLogOf(n)
	before := countLines(log)
	start := time.Now()
	var wg sync.WaitGroup
	sent := make([]int, 2)
	errs := make([]error, 2)
	for i, port := range []uint16{rrPort, rrClosedPort} {
		wg.Go(func() {
			errs[i] = netops.InNetns(from, func() error {
				var err error
				sent[i], _, err = flood.SYNs(netip.AddrPortFrom(rrAddrs[1], port), o.floodRate, o.rrDuration)
				return err
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	took := time.Since(start)
	quiet, size := time.Now(), logSize(log)
	for time.Since(quiet) < time.Second {
		time.Sleep(100 * time.Millisecond)
		if m := logSize(log); m != size {
			quiet, size = time.Now(), m
		}
	}
	return float64(sent[0]+sent[1]) / took.Seconds(), float64(countLines(log)-before) / quiet.Sub(start).Seconds(), nil
}

// logSize is the bytes of the flow log at path, its backups included.
func logSize(path string) int64 {
	var n int64
	for _, p := range append(logrotate.Backups(path), path) {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// countLines is the number of lines of the flow log at path, its backups
// included (0 if there is none).
func countLines(path string) int {
	n := 0
	for _, p := range append(logrotate.Backups(path), path) {
		if b, err := os.ReadFile(p); err == nil {
			n += bytes.Count(b, []byte("\n"))
		}
	}
	return n
}
