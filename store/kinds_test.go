package store

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// testRec is a kind of record as a role declares one (see Kind).
type testRec struct {
	Network     string    `json:"network"`
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
	Netns       string    `json:"netns,omitempty"`
	Pod         string    `json:"pod,omitempty"`
	Plugin      string    `json:"plugin,omitempty"`
	MTU         int       `json:"mtu,omitempty"`
	Created     time.Time `json:"created"`
	BootID      string    `json:"bootID,omitempty"`
}

func testRecHead(r *testRec) (Attachment, *time.Time, *string) {
	return Attachment{r.Network, r.ContainerID, r.IfName}, &r.Created, &r.BootID
}

var testRecs = Kind[testRec]{Bucket: "testkind", What: "test record", Head: testRecHead}

// TestKind: a role's kind of record, one per attachment: Put fills in
// Created and BootID, Get, List by network (not a neighbour with a common
// prefix), Delete twice, and a record without its attachment refused.
func TestKind(t *testing.T) {
	s := openT(t, t.TempDir())
	full := testRec{Network: "cbr0", ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/x", Pod: "default/web", Plugin: "p", MTU: 1400,
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), BootID: "boot"}
	recs := testRecs.In(s)
	if _, ok, err := recs.Get("cbr0", "c1", "eth0"); ok || err != nil {
		t.Fatalf("Get on an empty store = %v, %v", ok, err)
	}
	for _, r := range []testRec{full, {Network: "cbr0", ContainerID: "c2", IfName: "eth0"}, {Network: "cbr", ContainerID: "c1", IfName: "eth0"},
		{Network: "cbr0x", ContainerID: "c1", IfName: "eth0"}} {
		if err := recs.Put(r); err != nil {
			t.Fatalf("Put(%+v): %v", r, err)
		}
	}
	got, ok, err := recs.Get("cbr0", "c1", "eth0")
	if err != nil || !ok || !got.Created.Equal(full.Created) {
		t.Fatalf("Get = %+v, %v, %v", got, ok, err)
	}
	got.Created = full.Created
	if !reflect.DeepEqual(got, full) {
		t.Errorf("got  %+v\nwant %+v", got, full)
	}
	if r, _, _ := recs.Get("cbr0", "c2", "eth0"); r.Created.IsZero() || r.BootID != BootID() {
		t.Errorf("Created %v BootID %q not filled in", r.Created, r.BootID)
	}
	list, err := recs.List("cbr0")
	if err != nil || len(list) != 2 || list[0].ContainerID != "c1" || list[1].ContainerID != "c2" {
		t.Errorf("List(cbr0) = %+v, %v; want c1, c2 of cbr0 only", list, err)
	}
	if all, _ := recs.List(""); len(all) != 4 {
		t.Errorf("List(\"\") has %d records, want 4", len(all))
	}
	for range 2 {
		if err := recs.Delete("cbr0", "c2", "eth0"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if _, ok, _ := recs.Get("cbr0", "c2", "eth0"); ok {
		t.Error("record still there after Delete")
	}
	if err := recs.Put(testRec{Network: "n"}); err == nil {
		t.Error("Put without container ID and ifname succeeded")
	}

	// The raw view the node's tools read: the attachment's fields and the
	// record as stored.
	raw, err := s.RawRecords(testRecs.Bucket)
	if err != nil || len(raw) != 3 {
		t.Fatalf("RawRecords = %+v, %v; want 3", raw, err)
	}
	if r := raw[1]; r.Network != "cbr0" || r.ContainerID != "c1" || r.Netns != full.Netns || r.Pod != full.Pod || r.Plugin != "p" || r.BootID != "boot" {
		t.Errorf("RawRecords[1] = %+v, want cbr0/c1's fields", r)
	}
	var dec testRec
	if err := raw[1].Decode(&dec); err != nil || dec.MTU != 1400 {
		t.Errorf("Decode = %+v, %v", dec, err)
	}
	for range 2 {
		if err := s.DeleteRawRecord(testRecs.Bucket, "cbr0", "c1", "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, _ := recs.Get("cbr0", "c1", "eth0"); ok {
		t.Error("record still there after DeleteRawRecord")
	}
	if raw, err := s.RawRecords("nokind"); err != nil || len(raw) != 0 {
		t.Errorf("RawRecords of a bucket never written = %v, %v", raw, err)
	}
}

// TestKindTx: one transaction over a kind's records commits what fn did
// when fn returns nil, and nothing when it fails.
func TestKindTx(t *testing.T) {
	s := openT(t, t.TempDir())
	boom := errors.New("boom")
	err := testRecs.Update(s, func(tx KindTx[testRec]) error {
		if err := tx.Put(testRec{Network: "n", ContainerID: "a", IfName: "eth0"}); err != nil {
			return err
		}
		return tx.Put(testRec{Network: "n", ContainerID: "b", IfName: "eth0"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := testRecs.Update(s, func(tx KindTx[testRec]) error {
		if err := tx.Delete("n", "a", "eth0"); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}
	if err := testRecs.Update(s, func(tx KindTx[testRec]) error { return tx.Put(testRec{Network: "n"}) }); err == nil {
		t.Error("Put without container ID and ifname succeeded")
	}
	err = testRecs.View(s, func(tx KindTx[testRec]) error {
		got, err := tx.List("n")
		if err != nil || len(got) != 2 {
			t.Errorf("List = %+v, %v; want a and b (the failed Update's delete rolled back)", got, err)
		}
		if r, ok, err := tx.Get("n", "b", "eth0"); !ok || err != nil || r.Created.IsZero() {
			t.Errorf("Get(b) = %+v, %v, %v", r, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// On a store without the bucket: nothing, and deleting nothing is no error.
	e := openT(t, t.TempDir())
	if err := testRecs.Update(e, func(tx KindTx[testRec]) error {
		if got, err := tx.List(""); err != nil || len(got) != 0 {
			t.Errorf("List on an empty store = %v, %v", got, err)
		}
		return tx.Delete("n", "c", "eth0")
	}); err != nil {
		t.Fatal(err)
	}
}
