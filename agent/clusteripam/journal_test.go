package clusteripam

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/store"
)

// unwritable is an API that answers reads but no pool writes: the agent
// is killed before its write-behind lands.
type unwritable struct{ *Etcd }

func (unwritable) UpdatePool(context.Context, *Pool) (*Pool, error) {
	return nil, errors.New("connection refused")
}

// A node slice's ADDs and DELs are in the node's store before they answer,
// so an agent that restarts before its write-behind writes them then: the
// IPPool gets them, and the restarted agent hands out none of them again.
func TestSliceJournal(t *testing.T) {
	b := etcdBackend(t)
	ctx := ctxT(t)
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(cid string) *agentapi.IPAMRequest {
		r := req(cid, "ns/"+cid, "10.50.0.0/24")
		r.NetworkName, r.NodeSliceSize = "green", "/26"
		return r
	}
	before := &Allocator{B: unwritable{b}, Node: "n1", DataDir: dir, Log: quiet}
	held := map[string]string{}
	for _, cid := range []string{"c1", "c2", "c3"} {
		ips, err := before.Add(ctx, mk(cid))
		if err != nil {
			t.Fatal(err)
		}
		held[cid] = ips[0]
	}
	if err := before.Del(ctx, mk("c2")); err != nil {
		t.Fatal(err)
	}
	const pool = "green-n1-10.50.0.0-26"
	if got := allocations(t, b, pool); len(got) != 0 {
		t.Fatalf("the IPPool was written while the API refused writes: %v", got)
	}

	after := &Allocator{B: b, Node: "n1", DataDir: dir, Log: quiet}
	after.Recover(ctx)
	got := waitPool(t, b, pool, 2)
	for _, cid := range []string{"c1", "c3"} {
		if a := netip.MustParsePrefix(held[cid]).Addr(); got[a] != "ns/"+cid {
			t.Errorf("after the restart the IPPool has %s for %q, want %s's", a, got[a], cid)
		}
	}
	ips, err := after.Add(ctx, mk("c4"))
	if err != nil {
		t.Fatal(err)
	}
	if ips[0] != held["c2"] {
		t.Errorf("c4 got %s; the lowest free address is %s (c2's, released before the restart)", ips[0], held["c2"])
	}
	waitPool(t, b, pool, 3)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := store.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		js, err := st.SliceJournals()
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journal keeps changes the IPPool holds: %+v", js)
		}
	}
}
