package nft

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestDumpWhileCommitting: the package's reads of the kernel's objects
// are whole while another connection commits beside them. A set of 1,000
// elements stays; another writer adds 3,000 more in one commit and takes
// them away in the next, again and again, so that the set's hash table
// grows and shrinks under the dumps and a dump takes many messages; sets
// come and go in the same way. Every dump must hold the 1,000 once each,
// and the 3,000 all or none (each commit is atomic); every list of the
// sets, the steady ones and the others all or none. (The writer commits
// as each round of reads begins.) Without consistently's reading again
// (and its barrier) and dumpFamilyElems' on a repeat, the dumps of this
// machine's kernel (6.18) hold repeats, misses and half commits.
func TestDumpWhileCommitting(t *testing.T) {
	ns := nstest.NewNS(t, "dumpc")
	h, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := h.nftConn(); err != nil {
		t.Fatal(err)
	}
	w, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	wc, err := w.nftConn()
	if err != nil {
		t.Fatal(err)
	}
	tb := &nftables.Table{Name: "dumpc", Family: nftables.TableFamilyINet}
	set := &nftables.Set{Table: tb, Name: "s", KeyType: nftables.TypeIPAddr}
	elems := func(b byte, n int) []nftables.SetElement {
		out := make([]nftables.SetElement, n)
		for i := range out {
			out[i].Key = netip.AddrFrom4([4]byte{10, b, byte(i >> 8), byte(i)}).AsSlice()
		}
		return out
	}
	const steady, churn, churnSets = 1000, 3000, 40
	wc.AddTable(tb)
	if err := wc.AddSet(set, elems(0, steady)); err != nil {
		t.Fatal(err)
	}
	for i := range churnSets {
		if err := wc.AddSet(&nftables.Set{Table: tb, Name: fmt.Sprintf("steady%d", i), KeyType: nftables.TypeIPAddr}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}

	stop, round := make(chan struct{}), make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	werr := make(chan error, 1)
	go func() {
		defer wg.Done()
		for add := true; ; add = !add {
			select {
			case <-stop:
				return
			default:
			}
			for i := range churnSets {
				s := &nftables.Set{Table: tb, Name: fmt.Sprintf("churn%d", i), KeyType: nftables.TypeIPAddr}
				if add {
					if err := wc.AddSet(s, nil); err != nil {
						werr <- err
						return
					}
				} else {
					wc.DelSet(s)
				}
			}
			var err error
			if add {
				err = wc.SetAddElements(set, elems(1, churn))
			} else {
				err = wc.SetDeleteElements(set, elems(1, churn))
			}
			if err == nil {
				err = wc.Flush()
			}
			if err != nil {
				werr <- err
				return
			}
			// The next commit as the reader's next round begins (a
			// writer that never paused would interrupt every try).
			select {
			case <-round:
			case <-stop:
				return
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()

	for i := range 200 {
		select {
		case round <- struct{}{}:
		default:
		}
		select {
		case err := <-werr:
			t.Fatalf("the writer: %v", err)
		default:
		}
		got, err := h.dumpFamilyElems(tb.Family, tb.Name, set.Name)
		if err != nil {
			t.Fatalf("dump %d of the elements: %v", i, err)
		}
		seen := map[netip.Addr]int{}
		var ofChurn int
		for _, e := range got {
			a, _ := netip.AddrFromSlice(e.key)
			seen[a]++
			if a.As4()[1] == 1 {
				ofChurn++
			}
		}
		for _, e := range elems(0, steady) {
			if a, _ := netip.AddrFromSlice(e.Key); seen[a] != 1 {
				t.Fatalf("dump %d of the elements holds %s %d times, want once", i, a, seen[a])
			}
		}
		if ofChurn != 0 && ofChurn != churn {
			t.Fatalf("dump %d of the elements holds %d of the %d added in one commit, want all or none", i, ofChurn, churn)
		}

		sets, err := consistently(h, func() ([]*nftables.Set, error) { return h.nft.GetSets(tb) })
		if err != nil {
			t.Fatalf("list %d of the sets: %v", i, err)
		}
		names := map[string]int{}
		ofChurn = 0
		for _, s := range sets {
			names[s.Name]++
			if len(s.Name) > 5 && s.Name[:5] == "churn" {
				ofChurn++
			}
		}
		for j := range churnSets {
			if n := names[fmt.Sprintf("steady%d", j)]; n != 1 {
				t.Fatalf("list %d of the sets holds steady%d %d times, want once", i, j, n)
			}
		}
		if ofChurn != 0 && ofChurn != churnSets {
			t.Fatalf("list %d of the sets holds %d of the %d sets added in one commit, want all or none", i, ofChurn, churnSets)
		}
	}
}
