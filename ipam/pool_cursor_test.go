package ipam

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/store"
)

// A provider's refresh that adds or drops addresses changes the pools' range
// sets; round robin continues after the last address handed out instead of
// starting again at the first free one.
func TestAllocatePoolsCursorSurvivesRefresh(t *testing.T) {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pool := func(last ...int) []Pool {
		p := Pool{Subnet: prefix("10.240.0.0/16"), Owner: "NIC n", What: "secondary IPs"}
		for _, i := range last {
			p.Addrs = append(p.Addrs, addr(fmt.Sprintf("10.240.0.%d", i)))
		}
		return []Pool{p, {Subnet: prefix("fd00::/64"), Addrs: []netip.Addr{addr("fd00::5"), addr("fd00::6"), addr("fd00::7"), addr("fd00::8")}, Owner: "NIC n"}}
	}
	alloc := func(cid string, pools []Pool) []string {
		t.Helper()
		out, err := allocPools(t, s, cid, pools)
		if err != nil {
			t.Fatalf("allocate %s: %v", cid, err)
		}
		var got []string
		for _, a := range out {
			got = append(got, a.Addr.Addr().String())
		}
		return got
	}
	release := func(cid string) {
		t.Helper()
		if err := s.IPAM("net", func(tx *store.IPAMTx) error { _, err := Release(tx, cid, "eth0"); return err }); err != nil {
			t.Fatal(err)
		}
	}

	before := pool(36, 37, 38, 39, 40)
	for _, cid := range []string{"a", "b", "c"} {
		alloc(cid, before)
	}
	release("a") // .36 and fd00::5 are free again, before the cursors

	// The refresh adds .70: the set's ranges change.
	if got := alloc("d", pool(36, 37, 38, 39, 40, 70)); got[0] != "10.240.0.39" || got[1] != "fd00::8" {
		t.Errorf("after a refresh that added an address, d got %v, want 10.240.0.39 and fd00::8 (after the last ones handed out)", got)
	}
	// The refresh drops .39 (the cursor, released) and .40: round robin
	// continues at the next address above the cursor, .70.
	release("d")
	if got := alloc("e", pool(36, 37, 38, 70)); got[0] != "10.240.0.70" {
		t.Errorf("after a refresh that dropped the cursor's address, e got %v, want 10.240.0.70", got)
	}
	// Then it wraps to the first free address.
	if got := alloc("f", pool(36, 37, 38, 70)); got[0] != "10.240.0.36" {
		t.Errorf("after the last address f got %v, want 10.240.0.36 (wrapped)", got)
	}
	// Cursors are one per family, not one per set of ranges seen.
	s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		for _, key := range []string{"pools/ipv4", "pools/ipv6"} {
			if _, ok := tx.Cursor(key); !ok {
				t.Errorf("no cursor %q", key)
			}
		}
		return nil
	})
}
