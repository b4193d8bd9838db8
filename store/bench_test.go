package store

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkReserveRelease measures one reserve transaction (find the first
// free address, reserve it, move the cursor) and one release transaction on
// an open store, with 1k or 20k addresses reserved in a /14. "wrapped"
// searches from the start of the range, skipping the whole reserved block.
// Besides time it reports disk writes and pages written per operation pair,
// which do not depend on the disk's speed.
func BenchmarkReserveRelease(b *testing.B) {
	start, end := netip.MustParseAddr("10.64.0.1"), netip.MustParseAddr("10.67.255.254")
	for _, existing := range []int{1000, 20000} {
		for _, wrapped := range []bool{false, true} {
			name := fmt.Sprintf("existing=%d", existing)
			if wrapped {
				name += "/wrapped"
			}
			b.Run(name, func(b *testing.B) {
				s, err := Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				a := start
				for done := 0; done < existing; done += 1000 {
					s.IPAM("net", func(tx *IPAMTx) error {
						for i := done; i < done+1000 && i < existing; i++ {
							tx.Reserve(Reservation{Addr: a, ContainerID: fmt.Sprint("pre-", i), IfName: "eth0"})
							a = a.Next()
						}
						return tx.SetCursor("set", a.Prev())
					})
				}
				before := s.db.Stats().TxStats
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					cid := fmt.Sprint("bench-", i)
					var got netip.Addr
					err := s.IPAM("net", func(tx *IPAMTx) error {
						from := start
						if c, ok := tx.Cursor("set"); ok && !wrapped {
							from = c.Next()
						}
						var ok bool
						if got, ok = tx.NextFree(from, end); !ok {
							return fmt.Errorf("full")
						}
						if err := tx.Reserve(Reservation{Addr: got, ContainerID: cid, IfName: "eth0"}); err != nil {
							return err
						}
						return tx.SetCursor("set", got)
					})
					if err == nil {
						err = s.IPAM("net", func(tx *IPAMTx) error { _, err := tx.ReleaseOwner(cid, "eth0"); return err })
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after := s.db.Stats().TxStats
				b.ReportMetric(float64(after.GetWrite()-before.GetWrite())/float64(b.N), "writes/op")
				b.ReportMetric(float64(after.GetPageCount()-before.GetPageCount())/float64(b.N), "pages/op")
			})
		}
	}
}

// BenchmarkOpenReserveClose is a plugin call's store work (open, one
// reservation in one commit, close) in each durability mode, on the file
// system of the test's temp dir (EnvSync: "always" flushes every commit).
func BenchmarkOpenReserveClose(b *testing.B) {
	for _, mode := range []string{syncBoot, syncAlways} {
		b.Run("sync="+mode, func(b *testing.B) {
			dir := b.TempDir()
			getenv := func(k string) string {
				if k == EnvSync {
					return mode
				}
				return ""
			}
			a := netip.MustParseAddr("10.64.0.1")
			for i := 0; i < b.N; i++ {
				s, err := OpenWith(dir, Options{Getenv: getenv})
				if err != nil {
					b.Fatal(err)
				}
				err = s.IPAM("net", func(tx *IPAMTx) error {
					return tx.Reserve(Reservation{Addr: a, ContainerID: fmt.Sprint("c", i), IfName: "eth0"})
				})
				if cerr := s.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					b.Fatal(err)
				}
				a = a.Next()
			}
		})
	}
}
