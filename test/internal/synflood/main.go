// Command synflood opens TCP connections to ADDR:PORT at a steady rate and
// abandons each as soon as its SYN is out: a flood of new connections from
// one process, as a misbehaving pod sends them. A socket closed in SYN_SENT
// sends nothing more (no retransmit, no RST) and frees its port at once, so
// every SYN is a connection of its own and the rate holds for as long as
// asked. It prints how many SYNs it sent and over how long.
//
// The real-node flow log test (test/node, TestKubeNodeFlowLog) copies it
// into a pod, statically linked:
//
//	CGO_ENABLED=0 go build -o synflood ./test/internal/synflood
//	synflood -rate 10000 -for 30s 10.244.1.5:81
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	rate := flag.Int("rate", 10000, "SYNs a second")
	dur := flag.Duration("for", 30*time.Second, "how long")
	flag.Parse()
	if flag.NArg() != 1 || *rate < 1 || *dur <= 0 {
		fmt.Fprintln(os.Stderr, "usage: synflood [-rate N] [-for DURATION] ADDR:PORT")
		os.Exit(64)
	}
	ap, err := netip.ParseAddrPort(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "synflood: %v\n", err)
		os.Exit(64)
	}
	sent, took, err := flood(ap, *rate, *dur)
	fmt.Printf("sent %d SYNs in %.2f s\n", sent, took.Seconds())
	if err != nil {
		fmt.Fprintf(os.Stderr, "synflood: %v\n", err)
		os.Exit(1)
	}
}

// flood sends rate SYNs a second to ap for d, catching up every
// millisecond with what the clock says is due.
func flood(ap netip.AddrPort, rate int, d time.Duration) (sent int, took time.Duration, err error) {
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		took = now.Sub(start)
		if took >= d {
			break
		}
		for due := int(took.Seconds() * float64(rate)); sent < due; sent++ {
			if err := syn(ap); err != nil {
				return sent, took, err
			}
		}
	}
	return sent, took, nil
}

// syn starts a connection to ap without waiting for it and closes the
// socket: the SYN has left when connect returns EINPROGRESS.
func syn(ap netip.AddrPort) error {
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()})
	if a := ap.Addr().Unmap(); a.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	err = unix.Connect(fd, sa)
	unix.Close(fd)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return fmt.Errorf("connect %s: %w", ap, err)
	}
	return nil
}
