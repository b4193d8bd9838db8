package store

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func TestEndpoints(t *testing.T) {
	s := openT(t, t.TempDir())
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	full := Endpoint{
		Network: "net", ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/x",
		PodNamespace: "default", PodName: "web", PodUID: "uid-1",
		Plugin: "bridge", Bridge: "cni0", HostVeth: "veth1234", MAC: "0a:58:0a:f4:00:05",
		IPs:      []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24"), netip.MustParsePrefix("fd00::5/64")},
		Gateways: []netip.Addr{netip.MustParseAddr("10.1.0.1")},
		Routes: []Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.1.0.1")},
			{Dst: netip.MustParsePrefix("10.9.0.0/16")},
		},
		DNS:     DNS{Nameservers: []string{"10.96.0.10"}, Domain: "cluster.local", Search: []string{"a", "b"}, Options: []string{"ndots:5"}},
		Created: created, BootID: "boot",
		Extra: map[string]string{"k": "v"},
	}
	eps := []Endpoint{
		full,
		{Network: "net", ContainerID: "c2", IfName: "eth0"},
		{Network: "net2", ContainerID: "c1", IfName: "eth0"},
		{Network: "ne", ContainerID: "t", IfName: "eth0"},
	}
	for _, e := range eps {
		if err := s.PutEndpoint(e); err != nil {
			t.Fatalf("PutEndpoint(%+v): %v", e, err)
		}
	}

	t.Run("get round trip", func(t *testing.T) {
		got, ok, err := s.GetEndpoint("net", "c1", "eth0")
		if err != nil || !ok {
			t.Fatalf("GetEndpoint: %v %v", ok, err)
		}
		if !got.Created.Equal(full.Created) {
			t.Errorf("Created = %v, want %v", got.Created, full.Created)
		}
		got.Created = full.Created
		if !reflect.DeepEqual(got, full) {
			t.Errorf("got  %+v\nwant %+v", got, full)
		}
	})
	t.Run("defaults filled", func(t *testing.T) {
		got, _, _ := s.GetEndpoint("net", "c2", "eth0")
		if got.Created.IsZero() || got.BootID != BootID() {
			t.Errorf("Created %v BootID %q not filled in", got.Created, got.BootID)
		}
	})
	t.Run("get missing", func(t *testing.T) {
		if _, ok, err := s.GetEndpoint("net", "nope", "eth0"); ok || err != nil {
			t.Errorf("GetEndpoint(missing) = %v, %v", ok, err)
		}
	})
	t.Run("list", func(t *testing.T) {
		tests := []struct {
			network string
			want    []string
		}{
			{"net", []string{"c1", "c2"}},
			{"net2", []string{"c1"}},
			{"ne", []string{"t"}},
			{"none", nil},
			{"", []string{"t", "c1", "c2", "c1"}},
		}
		for _, tt := range tests {
			got, err := s.Endpoints(tt.network)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range got {
				ids = append(ids, e.ContainerID)
			}
			if !reflect.DeepEqual(ids, tt.want) {
				t.Errorf("Endpoints(%q) = %v, want %v", tt.network, ids, tt.want)
			}
		}
	})
	t.Run("delete twice", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			if err := s.DeleteEndpoint("net", "c1", "eth0"); err != nil {
				t.Fatalf("DeleteEndpoint #%d: %v", i, err)
			}
		}
		if _, ok, _ := s.GetEndpoint("net", "c1", "eth0"); ok {
			t.Error("endpoint still there after delete")
		}
	})
	t.Run("missing key fields", func(t *testing.T) {
		if err := s.PutEndpoint(Endpoint{Network: "net"}); err == nil {
			t.Error("PutEndpoint without container ID succeeded")
		}
	})
}

func TestEndpointsEmptyStore(t *testing.T) {
	s := openT(t, t.TempDir())
	if eps, err := s.Endpoints(""); err != nil || len(eps) != 0 {
		t.Errorf("Endpoints on an empty store = %v, %v", eps, err)
	}
	if err := s.DeleteEndpoint("n", "c", "eth0"); err != nil {
		t.Errorf("DeleteEndpoint on an empty store: %v", err)
	}
}
