package ipam

import (
	"fmt"
	"testing"

	"github.com/cnibox/cnibox/store"
)

// BenchmarkAllocateRelease measures the allocator and the store transaction
// alone (store kept open): one Allocate transaction and one Release
// transaction, with 1k or 20k addresses already reserved in a /14, the cursor
// either after the reserved block or (wrapped) moved in front of it before
// each Allocate.
func BenchmarkAllocateRelease(b *testing.B) {
	for _, existing := range []int{1000, 20000} {
		for _, wrapped := range []bool{false, true} {
			name := fmt.Sprintf("existing=%d", existing)
			if wrapped {
				name += "/wrapped"
			}
			b.Run(name, func(b *testing.B) {
				sets, _ := ParseSets("r", [][]RangeConfig{{{Subnet: "10.64.0.0/14"}}})
				s, err := store.Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				for done := 0; done < existing; done += 1000 {
					s.IPAM("net", func(tx *store.IPAMTx) error {
						for i := done; i < done+1000 && i < existing; i++ {
							if _, err := Allocate(tx, Request{ContainerID: fmt.Sprint("pre-", i), IfName: "eth0", Sets: sets}); err != nil {
								b.Fatal(err)
							}
						}
						return nil
					})
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					cid := fmt.Sprint("bench-", i)
					err := s.IPAM("net", func(tx *store.IPAMTx) error {
						if wrapped {
							// Wrap before each ADD: it has to skip the whole block.
							if err := tx.SetCursor(sets[0].ID(), sets[0][0].End); err != nil {
								return err
							}
						}
						_, err := Allocate(tx, Request{ContainerID: cid, IfName: "eth0", Sets: sets})
						return err
					})
					if err == nil {
						err = s.IPAM("net", func(tx *store.IPAMTx) error { _, err := Release(tx, cid, "eth0"); return err })
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
