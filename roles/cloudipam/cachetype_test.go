package cloudipam

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/cnibox/cnibox/store"
)

// TestCache: the provider's answer is kept beside the network's
// reservations, in the same transaction, and read back as it was.
func TestCache(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := netip.MustParseAddr
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
	err = st.IPAM("net", func(tx *store.IPAMTx) error {
		if _, ok := CacheOf(tx); ok {
			t.Error("a fresh store has a cloud cache")
		}
		if err := tx.Reserve(store.Reservation{Addr: a("10.240.0.36"), ContainerID: "c1", IfName: "eth0"}); err != nil {
			return err
		}
		return PutCache(tx, want)
	})
	if err != nil {
		t.Fatal(err)
	}
	st.ViewIPAM("net", func(tx *store.IPAMTx) error {
		got, ok := CacheOf(tx)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("CacheOf = %+v, %v\nwant %+v", got, ok, want)
		}
		return nil
	})
	if v, _ := st.IPAMViews("net"); len(v) != 1 || !reflect.DeepEqual(keptPools(v[0].Kept)[0].Addrs, want.NICs[0].Addrs) {
		t.Errorf("the pools inspect ipam lists: %+v", keptPools(v[0].Kept))
	}
}
