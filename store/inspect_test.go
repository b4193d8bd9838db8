package store

import (
	"net/netip"
	"reflect"
	"testing"
)

// TestIPAMViews: every network's reservations, cursors and sticky records
// come back in one read; a filter picks one network; an empty store has none.
func TestIPAMViews(t *testing.T) {
	s := openT(t, t.TempDir())
	if nets, err := s.IPAMNetworks(); err != nil || len(nets) != 0 {
		t.Fatalf("IPAMNetworks on an empty store = %v, %v", nets, err)
	}
	for _, n := range []string{"net-b", "net-a"} {
		if err := s.IPAM(n, func(tx *IPAMTx) error {
			r := res("10.1.0.5", "c-"+n, "eth0")
			r.Pod = "ns/" + n
			if err := tx.Reserve(r); err != nil {
				return err
			}
			if err := tx.Reserve(Reservation{Addr: a("fd00::5"), ContainerID: "c-" + n, IfName: "eth0"}); err != nil {
				return err
			}
			if err := tx.SetCursor("10.1.0.1-10.1.0.254", a("10.1.0.5")); err != nil {
				return err
			}
			return tx.SetSticky("ns/"+n, []netip.Addr{a("10.1.0.5")})
		}); err != nil {
			t.Fatal(err)
		}
	}
	nets, err := s.IPAMNetworks()
	if err != nil || !reflect.DeepEqual(nets, []string{"net-a", "net-b"}) {
		t.Fatalf("IPAMNetworks = %v, %v; want [net-a net-b]", nets, err)
	}
	all, err := s.IPAMViews("")
	if err != nil || len(all) != 2 || all[0].Network != "net-a" || all[1].Network != "net-b" {
		t.Fatalf("IPAMViews(\"\") = %+v, %v", all, err)
	}
	v := all[1]
	if len(v.Reservations) != 2 || v.Reservations[0].Addr != a("10.1.0.5") || v.Reservations[1].Addr != a("fd00::5") ||
		v.Reservations[0].ContainerID != "c-net-b" || v.Reservations[0].Pod != "ns/net-b" || v.Reservations[0].Network != "net-b" {
		t.Errorf("reservations of net-b = %+v", v.Reservations)
	}
	if want := []IPAMCursor{{SetID: "10.1.0.1-10.1.0.254", Last: a("10.1.0.5")}}; !reflect.DeepEqual(v.Cursors, want) {
		t.Errorf("cursors = %+v, want %+v", v.Cursors, want)
	}
	if want := map[string][]netip.Addr{"ns/net-b": {a("10.1.0.5")}}; !reflect.DeepEqual(v.Sticky, want) {
		t.Errorf("sticky = %v, want %v", v.Sticky, want)
	}
	one, err := s.IPAMViews("net-a")
	if err != nil || len(one) != 1 || one[0].Network != "net-a" {
		t.Errorf("IPAMViews(net-a) = %+v, %v", one, err)
	}
	none, err := s.IPAMViews("no-such-net")
	if err != nil || len(none) != 0 {
		t.Errorf("IPAMViews(no-such-net) = %+v, %v", none, err)
	}
}
