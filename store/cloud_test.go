package store

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func TestCloudCache(t *testing.T) {
	s := openT(t, t.TempDir())
	s.ViewIPAM("net", func(tx *IPAMTx) error {
		if _, ok := tx.CloudCache(); ok {
			t.Error("a fresh store has a cloud cache")
		}
		return nil
	})
	want := CloudCache{
		Provider: "azure", Source: "http://168.63.129.16/x",
		Fetched: time.Unix(1700000000, 0).UTC(), Attempted: time.Unix(1700000001, 0).UTC(),
		NICs: []CloudNIC{{
			MAC: "000d3a51c490", Name: "eth0", Subnet: netip.MustParsePrefix("10.240.0.0/16"),
			Primary:  []netip.Addr{a("10.240.0.35")},
			Addrs:    []netip.Addr{a("10.240.0.36"), a("10.240.0.37")},
			Vanished: []netip.Addr{a("10.240.0.99")},
		}},
	}
	update(t, s, func(tx *IPAMTx) error {
		// The cache shares the transaction with a reservation.
		if err := tx.Reserve(res("10.240.0.36", "c1", "eth0")); err != nil {
			return err
		}
		return tx.PutCloudCache(want)
	})
	s.ViewIPAM("net", func(tx *IPAMTx) error {
		got, ok := tx.CloudCache()
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("CloudCache() = %+v, %v\nwant %+v", got, ok, want)
		}
		if n := len(tx.All()); n != 1 {
			t.Errorf("the cache shows up among the reservations: %d", n)
		}
		return nil
	})
	s.ViewIPAM("other", func(tx *IPAMTx) error {
		if _, ok := tx.CloudCache(); ok {
			t.Error("another network sees the cache")
		}
		return nil
	})
}
