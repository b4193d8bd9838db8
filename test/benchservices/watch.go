package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// mapRef names the verdict map a proxy keeps its ClusterIPs in: the
// first four bytes of an element's key are the IPv4 address (the key is
// ipv4_addr . inet_proto . inet_service in both proxies). A proxy whose
// map is split over several tables (cnibox's shards) names the others
// in more: a map of each, one map to the watch.
type mapRef struct {
	family nftables.TableFamily
	table  string
	set    string
	more   []string
}

func (m mapRef) String() string {
	fam := map[nftables.TableFamily]string{nftables.TableFamilyIPv4: "ip", nftables.TableFamilyINet: "inet"}[m.family]
	if len(m.more) > 0 {
		return fmt.Sprintf("%s %s (and %d more tables) map %s", fam, m.table, len(m.more), m.set)
	}
	return fmt.Sprintf("%s %s map %s", fam, m.table, m.set)
}

// tables are the tables of the map.
func (m mapRef) tables() []string { return append([]string{m.table}, m.more...) }

// isTable reports whether table is one of the map's.
func (m mapRef) isTable(table string) bool { return slices.Contains(m.tables(), table) }

// mapWatch follows one map in one network namespace from the kernel's
// nftables notifications (the group nft monitor joins): which addresses
// are keys of its elements and since when, how many lie in a prefix, and
// when each transaction committed. If the socket overflows (a large
// transaction of a proxy that writes thousands of chains and rules), what
// it lost is read back from the kernel (a dump of the map), and a time
// found that way is the last commit seen before the dump.
type mapWatch struct {
	ref    mapRef
	ns     string
	prefix netip.Prefix
	conn   *netlink.Conn

	mu      sync.Mutex
	since   map[netip.Addr]time.Time // keys present, and when each arrived
	inPfx   int                      // how many of them are in prefix
	full    map[int]time.Time        // count wanted -> when inPfx first reached it
	wantN   int
	lastGen time.Time // when the last transaction was seen
	lastMsg time.Time // when the last message (or overflow) was
	gens    int
	lost    bool // an overflow: since may be wrong until the next dump
	// overflows counts the overflows (a row's times then come from a
	// dump, to the last commit seen before it).
	overflows int
	err       error
	wake      chan struct{}
}

// watchMap starts following ref in the namespace at ns, counting the
// addresses in prefix. Start it before the proxy, so that nothing is
// missed.
func watchMap(ns string, ref mapRef, prefix netip.Prefix) (*mapWatch, error) {
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
	// kube-proxy's first sync at 30,000 Services is hundreds of thousands
	// of chain, rule and element messages in one transaction.
	if sc, err := conn.SyscallConn(); err == nil {
		sc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 256<<20)
		})
	}
	w := &mapWatch{ref: ref, ns: ns, prefix: prefix, conn: conn, since: map[netip.Addr]time.Time{},
		full: map[int]time.Time{}, wake: make(chan struct{}, 1)}
	go w.run()
	return w, nil
}

func (w *mapWatch) close() { w.conn.Close() }

func (w *mapWatch) run() {
	for {
		msgs, err := w.conn.Receive()
		now := time.Now()
		if err != nil {
			w.mu.Lock()
			if errors.Is(err, unix.ENOBUFS) {
				w.lost = true
				w.overflows++
				w.lastMsg = now
			} else {
				w.err = err
			}
			w.mu.Unlock()
			w.notify()
			if w.err != nil {
				return
			}
			continue
		}
		w.mu.Lock()
		w.lastMsg = now
		for _, m := range msgs {
			if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
				continue
			}
			switch m.Header.Type & 0xff {
			case unix.NFT_MSG_NEWGEN:
				w.gens++
				w.lastGen = now
			case unix.NFT_MSG_NEWSETELEM:
				w.elements(m.Data, true, now)
			case unix.NFT_MSG_DELSETELEM:
				w.elements(m.Data, false, now)
			case unix.NFT_MSG_DELTABLE, unix.NFT_MSG_DELSET:
				if w.ours(m.Data) {
					w.reset()
				}
			}
		}
		w.mu.Unlock()
		w.notify()
	}
}

func (w *mapWatch) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// ours reports whether a table or set message (nfgenmsg, then attributes
// whose type 1 is the table's name) is about the map's table.
func (w *mapWatch) ours(data []byte) bool {
	if nftables.TableFamily(data[0]) != w.ref.family {
		return false
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return false
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_TABLE_NAME {
			return w.ref.isTable(ad.String())
		}
	}
	return false
}

// reset forgets every element (the table or map went).
func (w *mapWatch) reset() {
	w.since = map[netip.Addr]time.Time{}
	w.inPfx = 0
}

// elements applies one NEWSETELEM or DELSETELEM message of the map.
func (w *mapWatch) elements(data []byte, add bool, now time.Time) {
	if nftables.TableFamily(data[0]) != w.ref.family {
		return
	}
	keys, table, set, err := decodeElems(data[4:])
	if err != nil || !w.ref.isTable(table) || set != w.ref.set {
		return
	}
	for _, a := range keys {
		w.apply(a, add, now)
	}
}

func (w *mapWatch) apply(a netip.Addr, add bool, now time.Time) {
	_, had := w.since[a]
	switch {
	case add && !had:
		w.since[a] = now
		if w.prefix.Contains(a) {
			w.inPfx++
			if w.wantN > 0 && w.inPfx >= w.wantN {
				if _, ok := w.full[w.wantN]; !ok {
					w.full[w.wantN] = now
				}
			}
		}
	case !add && had:
		delete(w.since, a)
		if w.prefix.Contains(a) {
			w.inPfx--
		}
	}
}

// decodeElems reads a set element list message's table, set and the
// IPv4 addresses its elements' keys start with.
func decodeElems(b []byte) (keys []netip.Addr, table, set string, err error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, "", "", err
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_LIST_TABLE:
			table = ad.String()
		case unix.NFTA_SET_ELEM_LIST_SET:
			set = ad.String()
		case unix.NFTA_SET_ELEM_LIST_ELEMENTS:
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					if list.Type() != unix.NFTA_LIST_ELEM {
						continue
					}
					list.Nested(func(el *netlink.AttributeDecoder) error {
						for el.Next() {
							if el.Type() != unix.NFTA_SET_ELEM_KEY {
								continue
							}
							el.Nested(func(key *netlink.AttributeDecoder) error {
								for key.Next() {
									if v := key.Bytes(); key.Type() == unix.NFTA_DATA_VALUE && len(v) >= 4 {
										keys = append(keys, netip.AddrFrom4([4]byte(v[:4])))
									}
								}
								return nil
							})
						}
						return nil
					})
				}
				return nil
			})
		}
	}
	return keys, table, set, ad.Err()
}

// dump reads the map's keys from the kernel (none if it does not exist
// yet).
func (w *mapWatch) dump() (map[netip.Addr]bool, error) {
	f, err := os.Open(w.ns)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return nil, err
	}
	defer conn.CloseLasting()
	out := map[netip.Addr]bool{}
	for _, table := range w.ref.tables() {
		set, err := conn.GetSetByName(&nftables.Table{Name: table, Family: w.ref.family}, w.ref.set)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("%s: %w", w.ref, err)
		}
		els, err := conn.GetSetElements(set)
		if err != nil {
			return nil, fmt.Errorf("%s elements: %w", w.ref, err)
		}
		for _, e := range els {
			if len(e.Key) >= 4 {
				out[netip.AddrFrom4([4]byte(e.Key[:4]))] = true
			}
		}
	}
	return out, nil
}

// settleDump is how long the notifications must have been silent before
// a dump after an overflow: the transaction that overflowed the socket is
// over, and the proxy is not slowed down by dumps during it.
const settleDump = 100 * time.Millisecond

// resync replaces what the notifications said with a dump, once they
// have been silent for settleDump after an overflow lost some of them;
// the addresses that arrived meanwhile get the last commit's time.
func (w *mapWatch) resync() error {
	w.mu.Lock()
	lost, gen, quiet := w.lost, w.lastGen, time.Since(w.lastMsg) >= settleDump
	if lost && quiet {
		w.lost = false
	}
	w.mu.Unlock()
	if !lost || !quiet {
		return nil
	}
	keys, err := w.dump()
	if err != nil {
		w.mu.Lock()
		w.lost = true
		w.mu.Unlock()
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for a := range w.since {
		if !keys[a] {
			w.apply(a, false, gen)
		}
	}
	for a := range keys {
		w.apply(a, true, gen)
	}
	return nil
}

// overflowed is how many times the socket overflowed so far.
func (w *mapWatch) overflowed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.overflows
}

// poll is how often a wait looks when nothing wakes it.
const poll = 200 * time.Millisecond

// wait returns when done holds (read under the lock), or fails after
// timeout or when alive reports the proxy gone.
func (w *mapWatch) wait(what string, done func() (time.Time, bool), timeout time.Duration, alive func() error) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		if err := w.resync(); err != nil {
			return time.Time{}, err
		}
		w.mu.Lock()
		t, ok := done()
		err := w.err
		w.mu.Unlock()
		if ok {
			return t, nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("nftables notifications: %w", err)
		}
		if err := alive(); err != nil {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: not in %s after %s", what, w.ref, timeout)
		}
		wait := poll
		if w.isLost() {
			wait = settleDump // the dump waits for silence, not for a message
		}
		select {
		case <-w.wake:
		case <-time.After(wait):
		}
	}
}

func (w *mapWatch) isLost() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// waitCount waits until n addresses of the prefix are keys of the map,
// checks it with a dump, and returns when the n-th arrived.
func (w *mapWatch) waitCount(n int, timeout time.Duration, alive func() error) (time.Time, error) {
	w.mu.Lock()
	w.wantN = n
	if w.inPfx >= n {
		w.full[n] = time.Now()
	}
	w.mu.Unlock()
	for {
		t, err := w.wait(fmt.Sprintf("%d Services", n), func() (time.Time, bool) {
			t, ok := w.full[n]
			return t, ok
		}, timeout, alive)
		if err != nil {
			return t, err
		}
		keys, err := w.dump()
		if err != nil {
			return t, err
		}
		k := 0
		for a := range keys {
			if w.prefix.Contains(a) {
				k++
			}
		}
		if k >= n {
			return t, nil
		}
		// The notifications said more than the kernel holds: read again.
		w.mu.Lock()
		delete(w.full, n)
		w.lost = true
		w.mu.Unlock()
	}
}

// waitAddr waits until a is a key of the map and returns when it arrived.
func (w *mapWatch) waitAddr(a netip.Addr, timeout time.Duration, alive func() error) (time.Time, error) {
	return w.wait(a.String(), func() (time.Time, bool) {
		t, ok := w.since[a]
		return t, ok
	}, timeout, alive)
}

// quiet waits until neither a transaction nor after (the harness's last
// API write: a proxy's sync of it may commit nothing) was less than d ago,
// up to timeout.
func (w *mapWatch) quiet(d time.Duration, after time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		last := w.lastGen
		w.mu.Unlock()
		if after.After(last) {
			last = after
		}
		if time.Since(last) >= d {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nftables still changing after %s", timeout)
		}
		time.Sleep(min(d-time.Since(last), 100*time.Millisecond) + time.Millisecond)
	}
}
