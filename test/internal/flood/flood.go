// Package flood sends floods of new TCP connections, as a misbehaving pod
// does: each a SYN whose socket is closed as soon as it is out. A socket
// closed in SYN_SENT sends nothing more (no retransmit, no RST) and frees
// its port at once (one an answer reached first is reset: SO_LINGER 0), so every SYN is a connection of its own and a rate
// holds for as long as asked. test/internal/synflood is its command;
// bench-policy floods from its pods' namespaces with it.
package flood

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// SYNs sends rate SYNs a second to ap for d, from the calling thread's
// network namespace, catching up every millisecond with what the clock
// says is due, and says how many it sent and over how long.
func SYNs(ap netip.AddrPort, rate int, d time.Duration) (sent int, took time.Duration, err error) {
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
	// Closed with a reset if the answer came first (a near, open port):
	// a normal close would leave the port in TIME_WAIT for a minute, and
	// a flood would run out of ports.
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("SO_LINGER: %w", err)
	}
	err = unix.Connect(fd, sa)
	unix.Close(fd)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return fmt.Errorf("connect %s: %w", ap, err)
	}
	return nil
}
