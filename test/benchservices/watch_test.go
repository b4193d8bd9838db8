package main

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/cnibox/cnibox/netops/nstest"
)

// The watch finds both proxies' maps by their names in a real kernel: a
// verdict map keyed ipv4_addr . inet_proto . inet_service, written here
// as each proxy would, is followed element by element from the
// notifications, and read back whole after a (simulated) overflow.
func TestWatchKernelMaps(t *testing.T) {
	for _, p := range []proxy{kubeProxy{}, cniboxProxy{}} {
		t.Run(p.tag(), func(t *testing.T) {
			ns := nstest.NewNS(t, "sbwatch")
			ref := p.target()
			w, err := watchMap(ns, ref, benchPrefix)
			if err != nil {
				t.Fatal(err)
			}
			defer w.close()
			alive := func() error { return nil }

			m := writeMap(t, ns, ref, benchIP(0), benchIP(1), sampleIP(0))
			before := time.Now()
			writeElems(t, ns, m, false, benchIP(2))
			at, err := w.waitCount(3, 10*time.Second, alive)
			if err != nil {
				t.Fatal(err)
			}
			if at.Before(before) {
				t.Errorf("the third Service arrived at %v, before it was written (%v)", at, before)
			}
			if _, err := w.waitAddr(sampleIP(0), 10*time.Second, alive); err != nil {
				t.Fatal(err)
			}
			// Elements of another map of the table are not the map's.
			writeMap(t, ns, mapRef{family: ref.family, table: ref.table, set: "other"}, benchIP(9))
			writeElems(t, ns, m, true, benchIP(0))
			// The delete's notification comes after the other map's.
			if _, err := w.wait("the delete", func() (time.Time, bool) {
				_, ok := w.since[benchIP(0)]
				return time.Time{}, !ok
			}, 10*time.Second, alive); err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			_, other := w.since[benchIP(9)]
			_, deleted := w.since[benchIP(0)]
			n := w.inPfx
			w.mu.Unlock()
			if other || deleted || n != 2 {
				t.Errorf("after a delete and another map: %d Services (want 2); another map's element counted: %v; the deleted one kept: %v", n, other, deleted)
			}
			// An overflow: what the kernel holds is read back.
			w.mu.Lock()
			w.reset()
			w.lost = true
			w.mu.Unlock()
			if _, err := w.waitCount(2, 10*time.Second, alive); err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			_, has := w.since[benchIP(2)]
			w.mu.Unlock()
			if !has {
				t.Errorf("after the dump %v is missing", benchIP(2))
			}
			if len(ref.more) == 0 {
				return
			}
			// cnibox's map is one per shard table: a Service in another
			// shard counts, from a notification and from a dump.
			writeMap(t, ns, mapRef{family: ref.family, table: ref.more[len(ref.more)-1], set: ref.set}, benchIP(3))
			if _, err := w.waitCount(3, 10*time.Second, alive); err != nil {
				t.Fatalf("a Service in shard %s: %v", ref.more[len(ref.more)-1], err)
			}
			w.mu.Lock()
			w.reset()
			w.lost = true
			w.mu.Unlock()
			if _, err := w.waitCount(3, 10*time.Second, alive); err != nil {
				t.Fatalf("a Service in shard %s, after a dump: %v", ref.more[len(ref.more)-1], err)
			}
		})
	}
}

func nftConn(t *testing.T, ns string) *nftables.Conn {
	t.Helper()
	f, err := os.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseLasting() })
	return c
}

// writeMap creates ref's table and verdict map with elements.
func writeMap(t *testing.T, ns string, ref mapRef, addrs ...netip.Addr) *nftables.Set {
	t.Helper()
	c := nftConn(t, ns)
	tab := c.AddTable(&nftables.Table{Name: ref.table, Family: ref.family})
	m := &nftables.Set{
		Table: tab, Name: ref.set, IsMap: true, Concatenation: true,
		KeyType:  nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService),
		DataType: nftables.TypeVerdict,
	}
	if err := c.AddSet(m, elems(addrs)); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("create %s: %v", ref, err)
	}
	return m
}

func writeElems(t *testing.T, ns string, m *nftables.Set, del bool, addrs ...netip.Addr) {
	t.Helper()
	c := nftConn(t, ns)
	var err error
	if del {
		err = c.SetDeleteElements(m, elems(addrs))
	} else {
		err = c.SetAddElements(m, elems(addrs))
	}
	if err == nil {
		err = c.Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// elems are the map's elements of addrs: addr . tcp . 80 : accept.
func elems(addrs []netip.Addr) []nftables.SetElement {
	var out []nftables.SetElement
	for _, a := range addrs {
		ip := a.As4()
		key := append(ip[:], 6, 0, 0, 0, 0, 80, 0, 0)
		out = append(out, nftables.SetElement{Key: key, VerdictData: &expr.Verdict{Kind: expr.VerdictAccept}})
	}
	return out
}
