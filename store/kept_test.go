package store

import (
	"bytes"
	"testing"
)

// TestKept: a role's value kept beside a network's reservations shares
// their transaction, is not a reservation, is the network's alone, shows
// in IPAMViews, and cannot take an allocator's bucket.
func TestKept(t *testing.T) {
	s := openT(t, t.TempDir())
	s.ViewIPAM("net", func(tx *IPAMTx) error {
		if v := tx.Kept("cloud", "pool"); v != nil {
			t.Errorf("a fresh store keeps %q", v)
		}
		return nil
	})
	want := []byte(`{"provider":"azure"}`)
	update(t, s, func(tx *IPAMTx) error {
		if err := tx.Reserve(res("10.240.0.36", "c1", "eth0")); err != nil {
			return err
		}
		return tx.PutKept("cloud", "pool", want)
	})
	s.ViewIPAM("net", func(tx *IPAMTx) error {
		if got := tx.Kept("cloud", "pool"); !bytes.Equal(got, want) {
			t.Errorf("Kept = %q, want %q", got, want)
		}
		if n := len(tx.All()); n != 1 {
			t.Errorf("the kept value shows up among the reservations: %d", n)
		}
		return nil
	})
	s.ViewIPAM("other", func(tx *IPAMTx) error {
		if v := tx.Kept("cloud", "pool"); v != nil {
			t.Error("another network sees the value")
		}
		return nil
	})
	views, err := s.IPAMViews("net")
	if err != nil || len(views) != 1 || !bytes.Equal(views[0].Kept["cloud/pool"], want) || len(views[0].Kept) != 1 {
		t.Errorf("IPAMViews = %+v, %v; want the kept value under cloud/pool", views, err)
	}
	err = s.IPAM("net", func(tx *IPAMTx) error { return tx.PutKept("owner", "x", []byte("y")) })
	if err == nil {
		t.Error("PutKept into the allocator's owner index succeeded")
	}
	if rep, err := s.Check(); err != nil || len(rep.Problems) != 0 {
		t.Errorf("store check: %v, %v", rep.Problems, err)
	}
}
