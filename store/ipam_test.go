package store

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var a = netip.MustParseAddr

func res(addr, cid, ifname string) Reservation {
	return Reservation{Addr: a(addr), ContainerID: cid, IfName: ifname, Subnet: netip.MustParsePrefix(addr + "/24").Masked()}
}

// update runs fn in an IPAM transaction and fails the test on error.
func update(t *testing.T, s *Store, fn func(tx *IPAMTx) error) {
	t.Helper()
	if err := s.IPAM("net", fn); err != nil {
		t.Fatal(err)
	}
}

func TestReserveGetRelease(t *testing.T) {
	s := openT(t, t.TempDir())
	created := time.Unix(1700000000, 5)
	update(t, s, func(tx *IPAMTx) error {
		r := res("10.1.0.5", "c1", "eth0")
		r.Pod, r.Created, r.BootID = "ns/p", created, "b"
		if err := tx.Reserve(r); err != nil {
			return err
		}
		if err := tx.Reserve(res("10.1.0.6", "c1", "eth0")); err != nil {
			return err
		}
		six := Reservation{Addr: a("fd00::5"), ContainerID: "c1", IfName: "eth0", Subnet: netip.MustParsePrefix("fd00::/64")}
		if err := tx.Reserve(six); err != nil {
			return err
		}
		return tx.Reserve(res("10.1.0.7", "c2", "eth0"))
	})

	t.Run("get", func(t *testing.T) {
		s.ViewIPAM("net", func(tx *IPAMTx) error {
			got, ok := tx.Get(a("10.1.0.5"))
			want := Reservation{Addr: a("10.1.0.5"), Network: "net", ContainerID: "c1", IfName: "eth0", Pod: "ns/p",
				Subnet: netip.MustParsePrefix("10.1.0.0/24"), Created: created, BootID: "b"}
			if !ok || !got.Created.Equal(created) {
				t.Fatalf("Get = %+v, %v", got, ok)
			}
			got.Created = created
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Get = %+v\nwant %+v", got, want)
			}
			if r, _ := tx.Get(a("10.1.0.6")); r.Created.IsZero() || r.BootID != BootID() {
				t.Errorf("defaults not filled: %+v", r)
			}
			if _, ok := tx.Get(a("10.1.0.8")); ok {
				t.Error("Get(free) reports reserved")
			}
			if _, ok := tx.Get(a("::ffff:10.1.0.5")); !ok {
				t.Error("Get of the IPv4-mapped form misses")
			}
			return nil
		})
	})

	t.Run("by owner", func(t *testing.T) {
		s.ViewIPAM("net", func(tx *IPAMTx) error {
			var got []string
			for _, r := range tx.ByOwner("c1", "eth0") {
				got = append(got, r.Addr.String())
			}
			want := []string{"10.1.0.5", "10.1.0.6", "fd00::5"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ByOwner(c1) = %v, want %v", got, want)
			}
			if rs := tx.ByOwner("c1", "eth1"); len(rs) != 0 {
				t.Errorf("ByOwner(c1, eth1) = %v", rs)
			}
			if rs := tx.ByOwner("c", "eth0"); len(rs) != 0 {
				t.Errorf("ByOwner(c) (a prefix of c1) = %v", rs)
			}
			return nil
		})
	})

	t.Run("taken", func(t *testing.T) {
		err := s.IPAM("net", func(tx *IPAMTx) error { return tx.Reserve(res("10.1.0.5", "c2", "eth0")) })
		if !errors.Is(err, ErrTaken) {
			t.Fatalf("err = %v, want ErrTaken", err)
		}
		// Same owner again updates in place.
		update(t, s, func(tx *IPAMTx) error {
			r := res("10.1.0.5", "c1", "eth0")
			r.Pod = "ns/q"
			return tx.Reserve(r)
		})
		s.ViewIPAM("net", func(tx *IPAMTx) error {
			if r, _ := tx.Get(a("10.1.0.5")); r.Pod != "ns/q" {
				t.Errorf("Pod = %q after update", r.Pod)
			}
			if n := len(tx.ByOwner("c1", "eth0")); n != 3 {
				t.Errorf("owner has %d addresses after update, want 3", n)
			}
			return nil
		})
	})

	t.Run("release owner", func(t *testing.T) {
		var freed []Reservation
		update(t, s, func(tx *IPAMTx) (err error) {
			freed, err = tx.ReleaseOwner("c1", "eth0")
			return err
		})
		if len(freed) != 3 {
			t.Errorf("freed %d, want 3", len(freed))
		}
		update(t, s, func(tx *IPAMTx) error {
			if rs, err := tx.ReleaseOwner("c1", "eth0"); err != nil || len(rs) != 0 {
				t.Errorf("second ReleaseOwner = %v, %v", rs, err)
			}
			if err := tx.Release(a("10.9.9.9")); err != nil {
				t.Errorf("Release(free): %v", err)
			}
			return nil
		})
		s.ViewIPAM("net", func(tx *IPAMTx) error {
			all := tx.All()
			if len(all) != 1 || all[0].ContainerID != "c2" {
				t.Errorf("All() = %+v, want only c2", all)
			}
			return nil
		})
	})

	t.Run("bad reservations", func(t *testing.T) {
		for _, r := range []Reservation{
			{Addr: a("10.0.0.1")},
			{Addr: a("10.0.0.1"), ContainerID: "c"},
			{ContainerID: "c", IfName: "eth0"},
			{Addr: a("fe80::1%eth0"), ContainerID: "c", IfName: "eth0"},
		} {
			if err := s.IPAM("net", func(tx *IPAMTx) error { return tx.Reserve(r) }); err == nil {
				t.Errorf("Reserve(%+v) succeeded", r)
			}
		}
	})
}

func TestNetworksAreSeparate(t *testing.T) {
	s := openT(t, t.TempDir())
	for _, n := range []string{"n1", "n2"} {
		if err := s.IPAM(n, func(tx *IPAMTx) error { return tx.Reserve(res("10.1.0.5", "c-"+n, "eth0")) }); err != nil {
			t.Fatal(err)
		}
	}
	s.ViewIPAM("n1", func(tx *IPAMTx) error {
		if r, _ := tx.Get(a("10.1.0.5")); r.ContainerID != "c-n1" || r.Network != "n1" {
			t.Errorf("n1 sees %+v", r)
		}
		return nil
	})
	if err := s.IPAM("", func(*IPAMTx) error { return nil }); err == nil {
		t.Error("IPAM with an empty network name succeeded")
	}
}

func TestIPAMRollbackAndNoopCommit(t *testing.T) {
	s := openT(t, t.TempDir())
	txid := func() (id int) {
		s.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	boom := errors.New("boom")
	err := s.IPAM("net", func(tx *IPAMTx) error {
		if err := tx.Reserve(res("10.1.0.5", "c1", "eth0")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	before := txid()
	update(t, s, func(tx *IPAMTx) error {
		if _, ok := tx.Get(a("10.1.0.5")); ok {
			t.Error("reservation of a failed transaction was kept")
		}
		_, err := tx.ReleaseOwner("nobody", "eth0")
		return err
	})
	if after := txid(); after != before {
		t.Errorf("a transaction that changed nothing was committed (txid %d -> %d)", before, after)
	}
	update(t, s, func(tx *IPAMTx) error { return tx.Reserve(res("10.1.0.5", "c1", "eth0")) })
	if after := txid(); after != before+1 {
		t.Errorf("txid %d -> %d after a change, want +1", before, after)
	}
}

func TestViewIPAMEmpty(t *testing.T) {
	s := openT(t, t.TempDir())
	err := s.ViewIPAM("none", func(tx *IPAMTx) error {
		if _, ok := tx.Get(a("10.0.0.1")); ok {
			t.Error("Get on an empty network")
		}
		if got, ok := tx.NextFree(a("10.0.0.1"), a("10.0.0.9")); !ok || got != a("10.0.0.1") {
			t.Errorf("NextFree = %v %v", got, ok)
		}
		if _, ok := tx.Cursor("x"); ok {
			t.Error("Cursor on an empty network")
		}
		if n := tx.CountIn(a("10.0.0.0"), a("10.0.0.255")); n != 0 {
			t.Errorf("CountIn = %d", n)
		}
		if len(tx.All()) != 0 || len(tx.ByOwner("c", "e")) != 0 || len(tx.Sticky("p/q")) != 0 {
			t.Error("empty network has content")
		}
		if err := tx.Reserve(res("10.0.0.1", "c", "eth0")); err == nil {
			t.Error("Reserve in a read-only transaction succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCursorAndSticky(t *testing.T) {
	s := openT(t, t.TempDir())
	update(t, s, func(tx *IPAMTx) error {
		if err := tx.SetCursor("set-a", a("10.1.0.9")); err != nil {
			return err
		}
		if err := tx.SetCursor("set-b", a("fd00::9")); err != nil {
			return err
		}
		if err := tx.SetCursor("", a("10.1.0.9")); err == nil {
			t.Error("SetCursor with an empty id succeeded")
		}
		return tx.SetSticky("ns/web", []netip.Addr{a("10.1.0.9"), a("fd00::9")})
	})
	update(t, s, func(tx *IPAMTx) error {
		if c, ok := tx.Cursor("set-a"); !ok || c != a("10.1.0.9") {
			t.Errorf("Cursor(set-a) = %v %v", c, ok)
		}
		if c, ok := tx.Cursor("set-b"); !ok || c != a("fd00::9") {
			t.Errorf("Cursor(set-b) = %v %v", c, ok)
		}
		if got := tx.Sticky("ns/web"); !reflect.DeepEqual(got, []netip.Addr{a("10.1.0.9"), a("fd00::9")}) {
			t.Errorf("Sticky = %v", got)
		}
		return tx.SetSticky("ns/web", nil)
	})
	s.ViewIPAM("net", func(tx *IPAMTx) error {
		if got := tx.Sticky("ns/web"); len(got) != 0 {
			t.Errorf("Sticky after delete = %v", got)
		}
		return nil
	})
}

func TestCorruptRecord(t *testing.T) {
	s := openT(t, t.TempDir())
	update(t, s, func(tx *IPAMTx) error { return tx.Reserve(res("10.1.0.5", "c1", "eth0")) })
	s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIPAM).Bucket([]byte("net")).Bucket(bucketAddr4).Put(addrKey(a("10.1.0.5")), []byte{1, 2})
	})
	err := s.ViewIPAM("net", func(tx *IPAMTx) error {
		tx.Get(a("10.1.0.5"))
		return nil
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("err = %v, want ErrCorrupt", err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	tests := []Reservation{
		{Addr: a("10.0.0.1"), Network: "n"},
		{Addr: a("10.0.0.1"), Network: "n", ContainerID: "c", IfName: "eth0", Pod: "ns/p", Subnet: netip.MustParsePrefix("10.0.0.0/8"), Created: time.Unix(1, 2), BootID: "x"},
		{Addr: a("fd00::1"), Network: "n", ContainerID: string(make([]byte, 300)), Subnet: netip.MustParsePrefix("fd00::1/128")},
	}
	for i, want := range tests {
		got, err := decodeReservation(want.Addr, want.Network, encodeReservation(want))
		if err != nil || !got.Created.Equal(want.Created) {
			t.Fatalf("#%d: %+v %v", i, got, err)
		}
		got.Created = want.Created
		if !reflect.DeepEqual(got, want) {
			t.Errorf("#%d: got %+v want %+v", i, got, want)
		}
		enc := encodeReservation(want)
		for n := 0; n < len(enc); n++ {
			if _, err := decodeReservation(want.Addr, "n", enc[:n]); err == nil && n < len(enc) {
				// A prefix may decode only if it still holds every string.
				if n < resHeader {
					t.Errorf("#%d: %d-byte prefix decoded", i, n)
				}
			}
		}
	}
}

// TestRunIndex checks the run index (NextFree, CountIn) against a plain set
// under random reserves and releases, in both families and at the edges of
// the address space.
func TestRunIndex(t *testing.T) {
	bases := []netip.Addr{a("10.1.0.0"), a("fd00::"), a("255.255.255.192"), a("0.0.0.0")}
	for _, base := range bases {
		t.Run(base.String(), func(t *testing.T) {
			s := openT(t, t.TempDir())
			addrs := make([]netip.Addr, 64)
			addrs[0] = base
			for i := 1; i < len(addrs); i++ {
				addrs[i] = addrs[i-1].Next()
			}
			held := map[netip.Addr]bool{}
			rng := rand.New(rand.NewPCG(1, uint64(len(base.String()))))
			for step := 0; step < 600; step++ {
				x := addrs[rng.IntN(len(addrs))]
				update(t, s, func(tx *IPAMTx) error {
					if held[x] {
						delete(held, x)
						return tx.Release(x)
					}
					held[x] = true
					return tx.Reserve(Reservation{Addr: x, ContainerID: "c" + x.String(), IfName: "eth0"})
				})
				i, j := rng.IntN(len(addrs)), rng.IntN(len(addrs))
				if j < i {
					i, j = j, i
				}
				s.ViewIPAM("net", func(tx *IPAMTx) error {
					wantFree, wantOK := netip.Addr{}, false
					wantCount := 0
					for k := i; k <= j; k++ {
						if held[addrs[k]] {
							wantCount++
						} else if !wantOK {
							wantFree, wantOK = addrs[k], true
						}
					}
					if got, ok := tx.NextFree(addrs[i], addrs[j]); got != wantFree || ok != wantOK {
						t.Fatalf("step %d: NextFree(%v, %v) = %v %v, want %v %v", step, addrs[i], addrs[j], got, ok, wantFree, wantOK)
					}
					if got := tx.CountIn(addrs[i], addrs[j]); got != wantCount {
						t.Fatalf("step %d: CountIn(%v, %v) = %d, want %d", step, addrs[i], addrs[j], got, wantCount)
					}
					wantRes, wantResOK := netip.Addr{}, false
					for k := i; k < len(addrs); k++ {
						if held[addrs[k]] {
							wantRes, wantResOK = addrs[k], true
							break
						}
					}
					if got, ok := tx.NextReserved(addrs[i]); wantResOK && (got != wantRes || !ok) {
						t.Fatalf("step %d: NextReserved(%v) = %v %v, want %v", step, addrs[i], got, ok, wantRes)
					}
					return nil
				})
			}
		})
	}
}

func TestRunIndexTopOfSpace(t *testing.T) {
	s := openT(t, t.TempDir())
	top := a("255.255.255.255")
	update(t, s, func(tx *IPAMTx) error { return tx.Reserve(Reservation{Addr: top, ContainerID: "c", IfName: "eth0"}) })
	s.ViewIPAM("net", func(tx *IPAMTx) error {
		if got, ok := tx.NextFree(top, top); ok {
			t.Errorf("NextFree at the top = %v", got)
		}
		if got, ok := tx.NextFree(top.Prev(), top); !ok || got != top.Prev() {
			t.Errorf("NextFree = %v %v", got, ok)
		}
		return nil
	})
}
