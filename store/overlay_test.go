package store

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func TestOverlayState(t *testing.T) {
	s := openT(t, t.TempDir())
	if _, found, err := s.Overlay("flannel.1"); err != nil || found {
		t.Fatalf("Overlay on an empty store = found %v, %v; want not found", found, err)
	}
	st := OverlayState{
		Lease: OverlayLease{
			Backend: "etcd", Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.3.0/24"),
			PublicIP: netip.MustParseAddr("172.17.8.101"), Iface: "eth1", Device: "flannel.1", VNI: 1, Port: 8472,
			VTEPMAC: "ee:8a:1f:f7:96:c7", MTU: 1450, IPMasq: true, SubnetFile: "/run/flannel/subnet.env",
			Acquired: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		},
		Peers: []OverlayPeer{{Subnet: netip.MustParsePrefix("10.244.2.0/24"), PublicIP: netip.MustParseAddr("172.17.8.103"), VTEPMAC: "02:00:00:00:00:01"}},
		Ready: true, LastSync: time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC), AgentPID: 42,
	}
	if err := s.PutOverlay(st); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.Overlay("flannel.1")
	if err != nil || !found {
		t.Fatalf("Overlay = found %v, %v", found, err)
	}
	if got.Updated.IsZero() {
		t.Error("Updated not set")
	}
	got.Updated = time.Time{}
	if !reflect.DeepEqual(got, st) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, st)
	}
	all, err := s.Overlays()
	if err != nil || len(all) != 1 {
		t.Fatalf("Overlays = %d records, %v; want 1", len(all), err)
	}
	for range 2 {
		if err := s.DeleteOverlay("flannel.1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, found, _ := s.Overlay("flannel.1"); found {
		t.Error("record still there after DeleteOverlay")
	}
	if err := s.PutOverlay(OverlayState{}); err == nil {
		t.Error("PutOverlay without a device name succeeded")
	}
}
