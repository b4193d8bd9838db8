package nft

import (
	"net"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// BenchmarkServicesNewConn: what the services tables cost a connection
// that is no Service's: a TCP connect, accept and close over the
// loopback of a namespace of its own, without the tables and with them
// (1,000 Services x 4 endpoints). Its SYN meets the nat output chains
// (the shards' one after the other, none matching) and postrouting;
// later packets meet none (conntrack); cpu-ns/op is the process's CPU
// time a connection (client and server). Root.
//
//	go test -run '^$' -bench ServicesNewConn -benchtime 20000x ./netops/nft
func BenchmarkServicesNewConn(b *testing.B) {
	for _, tables := range []bool{false, true} {
		name := "no-table"
		if tables {
			name = "services=1000"
		}
		b.Run(name, func(b *testing.B) {
			ns := nstest.NewNS(b, "svcc")
			nl := nstest.Netlink(b, ns)
			lo, err := nl.LinkByName("lo")
			if err != nil {
				b.Fatal(err)
			}
			if err := nl.LinkSetUp(lo); err != nil {
				b.Fatal(err)
			}
			if tables {
				h, err := Open(ns)
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				if err := NewServices(h, ServicesOptions{}).Apply(sortedSnap(manySnap(1000, 4))); err != nil {
					b.Fatal(err)
				}
			}
			err = nstest.Run(b, ns, func() error {
				ln, err := net.Listen("tcp4", "127.0.0.1:0")
				if err != nil {
					return err
				}
				defer ln.Close()
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						c.Close()
					}
				}()
				addr := ln.Addr().String()
				cpu0 := processCPU()
				b.ResetTimer()
				for range b.N {
					c, err := net.Dial("tcp4", addr)
					if err != nil {
						return err
					}
					c.Close()
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// processCPU is the process's CPU time so far (user and system, in ns):
// on a shared machine a connection's wall time is mostly waiting.
func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
