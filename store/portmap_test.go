package store

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func TestPortMapRecords(t *testing.T) {
	s := openT(t, t.TempDir())
	full := PortMapRecord{
		Network: "net", ContainerID: "c1", IfName: "eth0", Pod: "default/web",
		Mappings: []PortMapEntry{
			{Protocol: "tcp", HostPort: 8080, PodIP: netip.MustParseAddr("10.1.0.5"), PodPort: 80},
			{Protocol: "udp", HostIP: netip.MustParseAddr("fd00::1"), HostPort: 53, PodIP: netip.MustParseAddr("fd01::5"), PodPort: 5353},
		},
		Masq: []PortMasqEntry{
			{PodIP: netip.MustParseAddr("10.1.0.5")},
			{PodIP: netip.MustParseAddr("fd01::5"), All: true},
		},
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), BootID: "boot",
	}
	recs := []PortMapRecord{
		full,
		{Network: "net", ContainerID: "c2", IfName: "eth0"},
		{Network: "net2", ContainerID: "c1", IfName: "eth0"},
		{Network: "ne", ContainerID: "t", IfName: "eth0"},
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.UpdatePortMaps(func(tx *PortMapTx) error {
		for _, r := range recs {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	}))

	t.Run("get round trip", func(t *testing.T) {
		must(s.ViewPortMaps(func(tx *PortMapTx) error {
			got, ok, err := tx.Get("net", "c1", "eth0")
			if err != nil || !ok || !reflect.DeepEqual(got, full) {
				t.Errorf("Get = %+v, %v, %v; want %+v", got, ok, err, full)
			}
			if _, ok, err := tx.Get("net", "c9", "eth0"); ok || err != nil {
				t.Errorf("Get of a missing record = %v, %v", ok, err)
			}
			return nil
		}))
	})

	t.Run("list by network", func(t *testing.T) {
		for _, tt := range []struct {
			network string
			want    int
		}{{"net", 2}, {"net2", 1}, {"ne", 1}, {"", 4}, {"none", 0}} {
			must(s.ViewPortMaps(func(tx *PortMapTx) error {
				got, err := tx.List(tt.network)
				if err != nil || len(got) != tt.want {
					t.Errorf("List(%q) = %d records, %v; want %d", tt.network, len(got), err, tt.want)
				}
				for _, r := range got {
					if tt.network != "" && r.Network != tt.network {
						t.Errorf("List(%q) returned a record of %q", tt.network, r.Network)
					}
				}
				return nil
			}))
		}
	})

	t.Run("filled in", func(t *testing.T) {
		must(s.ViewPortMaps(func(tx *PortMapTx) error {
			r, _, _ := tx.Get("net", "c2", "eth0")
			if r.Created.IsZero() || r.BootID == "" {
				t.Errorf("Put did not fill Created/BootID: %+v", r)
			}
			return nil
		}))
	})

	t.Run("delete twice", func(t *testing.T) {
		for range 2 {
			must(s.UpdatePortMaps(func(tx *PortMapTx) error { return tx.Delete("net", "c1", "eth0") }))
		}
		must(s.ViewPortMaps(func(tx *PortMapTx) error {
			if _, ok, _ := tx.Get("net", "c1", "eth0"); ok {
				t.Error("record still there after Delete")
			}
			return nil
		}))
	})

	t.Run("invalid", func(t *testing.T) {
		err := s.UpdatePortMaps(func(tx *PortMapTx) error { return tx.Put(PortMapRecord{Network: "net"}) })
		if err == nil {
			t.Error("Put without container ID and ifname succeeded")
		}
	})

	t.Run("empty store", func(t *testing.T) {
		e := openT(t, t.TempDir())
		must(e.ViewPortMaps(func(tx *PortMapTx) error {
			got, err := tx.List("")
			if err != nil || len(got) != 0 {
				t.Errorf("List on an empty store = %v, %v", got, err)
			}
			return tx.Delete("net", "c", "eth0")
		}))
	})
}
