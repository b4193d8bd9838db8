package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftWatch listens to one node namespace's nftables notifications (the
// group nft monitor joins): the time of each committed transaction (its
// NEWGEN message), the first time an address it is told to look for
// appears in a set element's notification, and the chains each table has
// (NEWCHAIN and DELCHAIN: a wait counts them without dumping the table,
// which, run while the agents write, took their CPU in proportion to the
// table's size). iptables-nft's commits are nftables transactions too. A
// receive buffer overrun counts as a commit at the time it is noticed
// (what it lost is then checked by reading the kernel).
type nftWatch struct {
	conn *netlink.Conn

	mu   sync.Mutex
	gens int       // transactions seen
	last time.Time // when the last one was seen
	look map[[4]byte]time.Time
	// chains: the chains of each table the notifications named; lost: a
	// receive buffer overrun lost some (then the kernel is read).
	chains map[string]map[string]bool
	lost   bool
	wake   chan struct{}
	err    error
	close  func()
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
	w := &nftWatch{conn: conn, look: map[[4]byte]time.Time{}, chains: map[string]map[string]bool{}, wake: make(chan struct{}, 1)}
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
				w.mu.Lock()
				w.lost = true
				w.mu.Unlock()
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
			case unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN:
				w.noteChain(m.Data, m.Header.Type&0xff == unix.NFT_MSG_NEWCHAIN)
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

// noteChain notes a chain's notification (data: the nfgenmsg header,
// then the chain's attributes).
func (w *nftWatch) noteChain(data []byte, added bool) {
	if len(data) < 4 {
		return
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return
	}
	var table, name string
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CHAIN_TABLE:
			table = ad.String()
		case unix.NFTA_CHAIN_NAME:
			name = ad.String()
		}
	}
	if ad.Err() != nil || table == "" || name == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.chains[table] == nil {
		w.chains[table] = map[string]bool{}
	}
	if added {
		w.chains[table][name] = true
	} else {
		delete(w.chains[table], name)
	}
}

// countChains is countChains' answer from the notifications: the
// distinct keys of table's chains named with prefix; ok is false once an
// overrun lost some.
func (w *nftWatch) countChains(table, prefix string, key func(string) string) (n int, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost {
		return 0, false
	}
	seen := map[string]bool{}
	for name := range w.chains[table] {
		if strings.HasPrefix(name, prefix) {
			seen[key(name)] = true
		}
	}
	return len(seen), true
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
