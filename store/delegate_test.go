package store

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestDelegateRecords(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	full := DelegateRecord{
		Network: "cbr0", ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/x", Pod: "default/web",
		Plugin: "flannel",
		Delegates: []Delegate{{
			Name: "cbr0", IfName: "eth0", Type: "bridge",
			Conf:   json.RawMessage(`{"name":"cbr0","type":"bridge"}`),
			Result: json.RawMessage(`{"cniVersion":"1.0.0"}`),
		}},
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), BootID: "boot",
	}
	recs := []DelegateRecord{
		full,
		{Network: "cbr0", ContainerID: "c2", IfName: "eth0", Plugin: "flannel"},
		{Network: "cbr", ContainerID: "c1", IfName: "eth0", Plugin: "multi"},
		{Network: "cbr0x", ContainerID: "c1", IfName: "eth0", Plugin: "multi"},
	}
	for _, r := range recs {
		if err := s.Delegates().Put(r); err != nil {
			t.Fatalf("PutDelegateRecord(%+v): %v", r, err)
		}
	}
	got, ok, err := s.Delegates().Get("cbr0", "c1", "eth0")
	if err != nil || !ok {
		t.Fatalf("GetDelegateRecord: %v %v", ok, err)
	}
	if !got.Created.Equal(full.Created) {
		t.Errorf("Created = %v, want %v", got.Created, full.Created)
	}
	got.Created = full.Created
	if !reflect.DeepEqual(got, full) {
		t.Errorf("got  %+v\nwant %+v", got, full)
	}
	if r, _, _ := s.Delegates().Get("cbr0", "c2", "eth0"); r.Created.IsZero() || r.BootID != BootID() {
		t.Errorf("Created %v BootID %q not filled in", r.Created, r.BootID)
	}
	if _, ok, err := s.Delegates().Get("cbr0", "c1", "net1"); ok || err != nil {
		t.Errorf("GetDelegateRecord(missing) = %v, %v", ok, err)
	}

	list, err := s.Delegates().List("cbr0")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range list {
		ids = append(ids, r.Network+"/"+r.ContainerID)
	}
	if want := []string{"cbr0/c1", "cbr0/c2"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("DelegateRecords(cbr0) = %v, want %v (no neighbour network with a common prefix)", ids, want)
	}
	if all, _ := s.Delegates().List(""); len(all) != 4 {
		t.Errorf("DelegateRecords(\"\") has %d records, want 4", len(all))
	}

	for range 2 {
		if err := s.Delegates().Delete("cbr0", "c1", "eth0"); err != nil {
			t.Fatalf("DeleteDelegateRecord: %v", err)
		}
	}
	if _, ok, _ := s.Delegates().Get("cbr0", "c1", "eth0"); ok {
		t.Error("record still there after DeleteDelegateRecord")
	}
	if err := s.Delegates().Put(DelegateRecord{Network: "n"}); err == nil {
		t.Error("PutDelegateRecord without container ID and ifname succeeded")
	}
}
