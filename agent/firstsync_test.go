package agent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/agent/lease"
)

// TestFirstSynced: Options.FirstSynced runs once, at the first full sync,
// not at the updates before it nor at the resyncs after it.
func TestFirstSynced(t *testing.T) {
	calls := 0
	a := deviceless(t, Options{Manager: &renewOnly{}, Health: &Health{Metrics: NewMetrics()}, FirstSynced: func() { calls++ }})
	a.enqueue(lease.Update{Events: []lease.Event{{Type: lease.Added, Lease: lease.Lease{
		Subnet: netip.MustParsePrefix("10.5.2.0/24"), Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.9")}}}}})
	a.applyPending(context.Background())
	if calls != 0 {
		t.Fatalf("FirstSynced called %d times after an update, want 0", calls)
	}
	for i := 0; i < 3; i++ {
		if !a.fullSync() {
			t.Fatal("full sync failed")
		}
	}
	if calls != 1 {
		t.Errorf("FirstSynced called %d times after three full syncs, want 1", calls)
	}
}
