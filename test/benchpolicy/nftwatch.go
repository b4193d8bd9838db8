package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftWatch listens to one node namespace's nftables notifications (the
// group nft monitor joins): the time of each committed transaction (its
// NEWGEN message), and the first time an address it is told to look for
// appears in a set element's notification. iptables-nft's commits are
// nftables transactions too. A receive buffer overrun counts as a commit
// at the time it is noticed (what it lost is then checked by reading the
// kernel).
type nftWatch struct {
	conn *netlink.Conn

	mu    sync.Mutex
	gens  int       // transactions seen
	last  time.Time // when the last one was seen
	look  map[[4]byte]time.Time
	wake  chan struct{}
	err   error
	close func()
}

func watchNFT(ns string) (*nftWatch, error) {
	f, err := os.Open(ns)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return nil, fmt.Errorf("nftables notifications: %w", err)
	}
	if err := conn.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		conn.Close()
		return nil, fmt.Errorf("nftables notifications: %w", err)
	}
	// iptables-restore of a large filter table is thousands of messages.
	if sc, err := conn.SyscallConn(); err == nil {
		sc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		})
	}
	w := &nftWatch{conn: conn, look: map[[4]byte]time.Time{}, wake: make(chan struct{}, 1)}
	w.close = func() { conn.Close() }
	go w.run()
	return w, nil
}

func (w *nftWatch) run() {
	for {
		msgs, err := w.conn.Receive()
		now := time.Now()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				w.commit(now)
				continue
			}
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			w.notify()
			return
		}
		for _, m := range msgs {
			if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES {
				continue
			}
			switch m.Header.Type & 0xff {
			case unix.NFT_MSG_NEWGEN:
				w.commit(now)
			case unix.NFT_MSG_NEWSETELEM:
				w.mu.Lock()
				for ip, t := range w.look {
					if t.IsZero() && bytes.Contains(m.Data, ip[:]) {
						w.look[ip] = now
					}
				}
				w.mu.Unlock()
			}
		}
	}
}

func (w *nftWatch) commit(now time.Time) {
	w.mu.Lock()
	w.gens++
	w.last = now
	w.mu.Unlock()
	w.notify()
}

func (w *nftWatch) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// lookFor starts looking for ip in set element notifications.
func (w *nftWatch) lookFor(ip netip.Addr) {
	w.mu.Lock()
	w.look[ip.As4()] = time.Time{}
	w.mu.Unlock()
}

func (w *nftWatch) forget(ip netip.Addr) {
	w.mu.Lock()
	delete(w.look, ip.As4())
	w.mu.Unlock()
}

// poll is how often a wait reads the kernel when no commit wakes it.
const poll = 100 * time.Millisecond

// waitFor returns when the kernel holds what done checks, started at t0:
// the time of the commit after which done first holds (or of the element
// notification of ip, when ip is valid and done is nil). When done turns
// true with no commit since it was last false (kube-router's ipsets are no
// nftables), the time is when it was read: the kernel is read every poll.
func (w *nftWatch) waitFor(t0 time.Time, ip netip.Addr, done func() (bool, error), timeout time.Duration) (time.Time, error) {
	deadline := t0.Add(timeout)
	checked := -1 // the commits seen when done was last false
	for {
		w.mu.Lock()
		gens, last, err := w.gens, w.last, w.err
		t, found := time.Time{}, false
		if ip.IsValid() {
			t, found = w.look[ip.As4()]
			found = found && !t.IsZero()
		}
		w.mu.Unlock()
		if found {
			return t, nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("nftables notifications: %w", err)
		}
		if done != nil {
			ok, err := done()
			if err != nil {
				return time.Time{}, err
			}
			switch {
			case ok && gens != checked && last.After(t0):
				return last, nil
			case ok:
				return time.Now(), nil
			}
			checked = gens
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("not in the kernel after %s", timeout)
		}
		select {
		case <-w.wake:
		case <-time.After(poll):
		}
	}
}

// quiet waits until no transaction has been committed for d (at least one
// having been, when any is true), up to timeout.
func (w *nftWatch) quiet(d time.Duration, any bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		gens, last := w.gens, w.last
		w.mu.Unlock()
		if (!any || gens > 0) && time.Since(last) >= d {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nftables still changing (%d transactions) after %s", gens, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
