package store_test

import (
	"testing"

	"github.com/cnibox/cnibox/store"
)

func TestTuningAndBandwidthRecords(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	if _, found, err := st.Tuning().Get("n1", "c1", "eth0"); err != nil || found {
		t.Fatalf("GetTuning on an empty store = %v, %v", found, err)
	}
	on := true
	for _, r := range []store.TuningRecord{
		{Network: "n1", ContainerID: "c1", IfName: "eth0", MTU: 1500, Promisc: &on,
			Sysctls: []store.SysctlValue{{Key: "net/core/somaxconn", Value: "4096"}}},
		{Network: "n1", ContainerID: "c2", IfName: "eth0"},
		{Network: "n10", ContainerID: "c1", IfName: "eth0"},
	} {
		if err := st.Tuning().Put(r); err != nil {
			t.Fatal(err)
		}
	}
	r, found, err := st.Tuning().Get("n1", "c1", "eth0")
	if err != nil || !found || r.MTU != 1500 || r.Promisc == nil || !*r.Promisc || len(r.Sysctls) != 1 || r.Created.IsZero() {
		t.Fatalf("GetTuning = %+v, %v, %v", r, found, err)
	}
	if rs, err := st.Tuning().List("n1"); err != nil || len(rs) != 2 {
		t.Errorf("TuningRecords(n1) = %d records, %v; want 2 (not n10's)", len(rs), err)
	}
	if rs, _ := st.Tuning().List(""); len(rs) != 3 {
		t.Errorf("TuningRecords(all) = %d records, want 3", len(rs))
	}
	for range 2 {
		if err := st.Tuning().Delete("n1", "c1", "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	if _, found, _ := st.Tuning().Get("n1", "c1", "eth0"); found {
		t.Error("record still there after DeleteTuning")
	}
	if err := st.Tuning().Put(store.TuningRecord{Network: "n1"}); err == nil {
		t.Error("PutTuning without container ID succeeded")
	}

	if err := st.Bandwidth().Put(store.BandwidthRecord{Network: "n1", ContainerID: "c1", IfName: "eth0", Ifb: "cbw0", EgressRate: 1000}); err != nil {
		t.Fatal(err)
	}
	b, found, err := st.Bandwidth().Get("n1", "c1", "eth0")
	if err != nil || !found || b.Ifb != "cbw0" || b.EgressRate != 1000 {
		t.Fatalf("GetBandwidth = %+v, %v, %v", b, found, err)
	}
	if bs, _ := st.Bandwidth().List(""); len(bs) != 1 {
		t.Errorf("BandwidthRecords = %d, want 1", len(bs))
	}
	if err := st.Bandwidth().Delete("n1", "c1", "eth0"); err != nil {
		t.Fatal(err)
	}
	if bs, _ := st.Bandwidth().List("n1"); len(bs) != 0 {
		t.Errorf("BandwidthRecords after delete = %d, want 0", len(bs))
	}
}
