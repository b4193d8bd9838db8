package nftfake_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nft/nftfake"
)

// TestSteps: the differential test's steps give the kernel's errors on the
// fake alone (as any user), and a refused batch changes nothing, not even
// the generation.
func TestSteps(t *testing.T) {
	k := nftfake.New()
	c, err := k.Conn()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		gen, before := k.Generation(), dump(t, c)
		got := errText(s.do(c))
		if got != wantErr[s.name] {
			t.Errorf("%s: %s, want %s", s.name, got, wantErr[s.name])
		}
		if got != "ok" && (k.Generation() != gen || dump(t, c) != before) && !strings.HasPrefix(s.name, "single gets") {
			t.Errorf("%s: refused, yet the table or generation changed:\n%s\nwas\n%s", s.name, dump(t, c), before)
		}
	}
	if err := k.Err(); err != nil {
		t.Error(err)
	}
}

// TestGeneration: a committed batch that changes something starts a new
// generation; a refused one and one that changes nothing do not.
func TestGeneration(t *testing.T) {
	k := nftfake.New()
	c, _ := k.Conn()
	g0 := k.Generation()
	c.AddTable(tbl)
	if err := c.Flush(); err != nil || k.Generation() != g0+1 {
		t.Fatalf("a new table: %v, generation %d after %d", err, k.Generation(), g0)
	}
	c.AddTable(tbl) // exists: nothing to do
	if err := c.Flush(); err != nil || k.Generation() != g0+1 {
		t.Errorf("the table again: %v, generation %d, want %d", err, k.Generation(), g0+1)
	}
	c.AddChain(reg)
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "none"})
	if err := c.Flush(); !errors.Is(err, unix.ENOENT) || k.Generation() != g0+1 {
		t.Errorf("a refused batch: %v, generation %d, want %d", err, k.Generation(), g0+1)
	}
}

// TestExpiry: an element with a timeout is listed until the clock passes
// it, then gone from dumps and single gets; one without stays.
func TestExpiry(t *testing.T) {
	k := nftfake.New()
	c, _ := k.Conn()
	c.AddTable(tbl)
	if err := c.AddSet(tmo, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SetAddElements(tmo, []nftables.SetElement{{Key: ip("10.0.0.1"), Timeout: time.Hour}, {Key: ip("10.0.0.2")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	n := func() int {
		es, err := c.GetSetElements(tmo)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	if got := n(); got != 2 {
		t.Fatalf("%d elements, want 2", got)
	}
	k.Advance(59 * time.Minute)
	if got := n(); got != 2 {
		t.Fatalf("%d elements a minute before the timeout, want 2", got)
	}
	k.Advance(2 * time.Minute)
	if got := n(); got != 1 {
		t.Fatalf("%d elements after the timeout, want 1:\n%s", got, k)
	}
}

// TestUnmodeled: what the fake does not model is refused with an error
// naming the message, never accepted.
func TestUnmodeled(t *testing.T) {
	k := nftfake.New()
	c, _ := k.Conn()
	c.AddTable(tbl)
	c.AddFlowtable(&nftables.Flowtable{Table: tbl, Name: "ft"})
	err := c.Flush()
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("a flowtable: %v, want EOPNOTSUPP", err)
	}
	if err := k.Err(); err == nil || !strings.Contains(err.Error(), "NFT_MSG_NEWFLOWTABLE") {
		t.Errorf("Err() = %v, want one naming NFT_MSG_NEWFLOWTABLE", err)
	}
	if ts, _ := c.ListTables(); len(ts) != 0 {
		t.Errorf("the refused batch left %d tables", len(ts))
	}
}

// TestConcurrent: connections of several goroutines on one Kernel (run
// with -race).
func TestConcurrent(t *testing.T) {
	k := nftfake.New()
	c, _ := k.Conn()
	c.AddTable(tbl)
	if err := c.AddSet(addrs, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := k.Conn()
			for j := range 20 {
				if err := c.SetAddElements(addrs, []nftables.SetElement{{Key: []byte{10, byte(i), 0, byte(j)}}}); err != nil {
					t.Error(err)
					return
				}
				if err := c.Flush(); err != nil {
					t.Error(err)
					return
				}
				_ = k.String()
			}
		}()
	}
	wg.Wait()
	if es, err := c.GetSetElements(addrs); err != nil || len(es) != 160 {
		t.Errorf("%d elements (%v), want 160", len(es), err)
	}
}
