package clusteripam

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// gated holds every pool write until the test opens the gate: an API
// server that has stopped answering for a while.
type gated struct {
	*Etcd
	entered chan struct{}
	gate    chan struct{}
}

func (g *gated) UpdatePool(ctx context.Context, p *Pool) (*Pool, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Etcd.UpdatePool(ctx, p)
}

// An ADD whose caller gives up while the pool write hangs leaves nothing
// behind: the one being written is released again once the write lands,
// the one still queued is never written; an ADD after that gets the
// lowest address, and a DEL given up on is written anyway.
func TestAbandonedCalls(t *testing.T) {
	g := &gated{Etcd: etcdBackend(t), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	al := &Allocator{B: g, Node: "n1"}
	ctx := ctxT(t)
	const rng = "10.20.0.0/24"
	short, cancel := context.WithCancel(ctx)
	errs := make(chan error, 2)
	go func() { _, err := al.Add(short, req("c1", "ns/p1", rng)); errs <- err }()
	<-g.entered // c1's write is under way
	go func() { _, err := al.Add(short, req("c2", "ns/p2", rng)); errs <- err }()
	time.Sleep(100 * time.Millisecond) // c2 queues behind it (nothing to wait for: it only must not be written)
	cancel()
	for i := 0; i < 2; i++ {
		if err := <-errs; err == nil {
			t.Fatal("an ADD whose caller gave up succeeded")
		}
	}
	close(g.gate)
	idle(t, al, "10.20.0.0-24")
	if got := allocations(t, g, "10.20.0.0-24"); len(got) != 0 {
		t.Fatalf("given-up ADDs left %v", got)
	}
	ips, err := al.Add(ctx, req("c3", "ns/p3", rng))
	if err != nil || ips[0] != "10.20.0.1/24" {
		t.Fatalf("ADD after the given-up ones: %v, %v", ips, err)
	}
	gone, cancel2 := context.WithCancel(ctx)
	cancel2()
	_ = al.Del(gone, req("c3", "ns/p3", rng))
	idle(t, al, "10.20.0.0-24")
	if got := allocations(t, g, "10.20.0.0-24"); len(got) != 0 {
		t.Fatalf("a DEL given up on was not written: %v", got)
	}
}

// idle waits until the allocator has nothing queued or being written for
// the pool.
func idle(t *testing.T, al *Allocator, pool string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		al.mu.Lock()
		b := al.batches[pool]
		busy := b != nil && (b.running || len(b.pending) > 0)
		al.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s: the writer is still busy after 30 s", pool)
		}
	}
}

// lagging answers cached reads with the pool as it was when the test
// froze it: an informer that has not seen the last writes yet (its watch
// broken while the API server did not answer).
type lagging struct {
	*Etcd
	frozen *Pool
}

func (l *lagging) GetPool(ctx context.Context, name string, fresh bool) (*Pool, error) {
	if !fresh && l.frozen != nil {
		return l.frozen.clone(), nil
	}
	return l.Etcd.GetPool(ctx, name, fresh)
}

// A release whose address the cache does not show yet is written all the
// same: the ADD's write landed after its caller gave up (the API server
// stalled), the agent's cache has not seen it, and the queued release
// (or the runtime's DEL) must not call it done on the cache's word.
func TestReleaseUnseenByCache(t *testing.T) {
	l := &lagging{Etcd: etcdBackend(t)}
	al := &Allocator{B: l, Node: "n1"}
	ctx := ctxT(t)
	const rng, pool = "10.21.0.0/24", "10.21.0.0-24"
	if _, err := al.Add(ctx, req("c0", "ns/p0", rng)); err != nil {
		t.Fatal(err)
	}
	p, err := l.Etcd.GetPool(ctx, pool, true)
	if err != nil {
		t.Fatal(err)
	}
	l.frozen = p // the cache stops here
	if _, err := al.Add(ctx, req("c1", "ns/p1", rng)); err != nil {
		t.Fatal(err)
	}
	if err := al.Del(ctx, req("c1", "ns/p1", rng)); err != nil {
		t.Fatal(err)
	}
	idle(t, al, pool)
	if got := allocations(t, l, pool); len(got) != 1 || got[netip.MustParseAddr("10.21.0.1")] != "ns/p0" {
		t.Fatalf("after c1's DEL with a cache that never saw c1: %v, want only 10.21.0.1 of ns/p0", got)
	}
}
