package hostlocal_test

import (
	"fmt"
	"testing"

	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/store"
)

const benchIPAM = `{"type":"host-local","ranges":[[{"subnet":"10.64.0.0/14"}]]}`

// BenchmarkAddDel measures one ADD and one DEL through the CNI adapter, each
// opening and closing the store as a fresh process does, with 1k or 20k
// addresses already reserved in a /14. "wrapped" puts the round-robin cursor
// in front of the reserved block before each ADD, so the ADD must skip all of
// it (the case after the pool wraps). The cost should not grow with the
// number of reservations.
func BenchmarkAddDel(b *testing.B) {
	for _, existing := range []int{1000, 20000} {
		for _, wrapped := range []bool{false, true} {
			name := fmt.Sprintf("existing=%d", existing)
			if wrapped {
				name += "/wrapped"
			}
			b.Run(name, func(b *testing.B) {
				n := newNode(b)
				c := conf("1.1.0", benchIPAM)
				prefill(b, n.Dir, existing, wrapped)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					cid := fmt.Sprintf("bench-%d", i)
					if wrapped && i > 0 {
						b.StopTimer()
						wrapCursor(b, n.Dir)
						b.StartTimer()
					}
					n.Must(hostlocal.Role, "ADD", cid, c, nil)
					n.Must(hostlocal.Role, "DEL", cid, c, nil)
				}
			})
		}
	}
}

// prefill reserves count addresses of benchIPAM's range, 1000 per transaction.
func prefill(b *testing.B, dir string, count int, wrapped bool) {
	b.Helper()
	for done := 0; done < count; done += 1000 {
		prefillFrom(b, dir, done, min(1000, count-done))
	}
	if wrapped {
		wrapCursor(b, dir)
	}
}

// prefillFrom reserves count addresses for containers pre-<first>... in one transaction.
func prefillFrom(b *testing.B, dir string, first, count int) {
	b.Helper()
	sets, err := ipam.ParseSets("ipam.ranges", [][]ipam.RangeConfig{{{Subnet: "10.64.0.0/14"}}})
	if err != nil {
		b.Fatal(err)
	}
	s, err := store.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	err = s.IPAM("mynet", func(tx *store.IPAMTx) error {
		for i := first; i < first+count; i++ {
			req := ipam.Request{ContainerID: fmt.Sprintf("pre-%d", i), IfName: "eth0", Sets: sets}
			if _, err := ipam.Allocate(tx, req); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// wrapCursor puts the round-robin cursor at the end of the range, so the
// next ADD wraps to the start and has to skip every reserved address there.
func wrapCursor(b *testing.B, dir string) {
	b.Helper()
	sets, _ := ipam.ParseSets("ipam.ranges", [][]ipam.RangeConfig{{{Subnet: "10.64.0.0/14"}}})
	s, err := store.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.IPAM("mynet", func(tx *store.IPAMTx) error { return tx.SetCursor(sets[0].ID(), sets[0][0].End) }); err != nil {
		b.Fatal(err)
	}
}
