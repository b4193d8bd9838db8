//go:build !nokube

package services

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
)

// TestWatchServiceCIDRs: the ServiceCIDR objects' ranges, as the cache
// hands them (added, updated, deleted, a DeletedFinalStateUnknown), are
// the snapshot's ServiceCIDRs at the next sync, and a change asks for
// one.
func TestWatchServiceCIDRs(t *testing.T) {
	touched := 0
	w := &watch{state: NewState(func() { touched++ })}
	s := NewSyncer(Config{State: w.state, ServiceCIDRs: w.serviceCIDRs})
	h := handler(w.setServiceCIDR, w.deleteServiceCIDR)
	p := netip.MustParsePrefix
	cidrs := func() []netip.Prefix {
		t.Helper()
		snap, err := s.complete(w.state.last)
		if err != nil {
			t.Fatal(err)
		}
		return snap.ServiceCIDRs
	}
	h.OnAdd(&cluster.ServiceCIDR{Name: "kubernetes", CIDRs: []netip.Prefix{p("10.96.0.0/16"), p("fd96::/112")}}, true)
	h.OnAdd(&cluster.ServiceCIDR{Name: "more", CIDRs: []netip.Prefix{p("10.97.0.0/24")}}, true)
	if got, want := cidrs(), []netip.Prefix{p("10.96.0.0/16"), p("10.97.0.0/24"), p("fd96::/112")}; !slices.Equal(got, want) {
		t.Errorf("added: %v, want %v", got, want)
	}
	before := touched
	h.OnUpdate(nil, &cluster.ServiceCIDR{Name: "more", CIDRs: []netip.Prefix{p("10.97.0.0/24")}})
	if touched != before {
		t.Error("an update that changed nothing asked for a sync")
	}
	h.OnUpdate(nil, &cluster.ServiceCIDR{Name: "more", CIDRs: []netip.Prefix{p("10.98.0.0/24")}})
	if touched != before+1 {
		t.Error("a changed range asked for no sync")
	}
	h.OnDelete(&cluster.ServiceCIDR{Name: "kubernetes"})
	if got, want := cidrs(), []netip.Prefix{p("10.98.0.0/24")}; !slices.Equal(got, want) {
		t.Errorf("one deleted: %v, want %v", got, want)
	}
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "more", Obj: &cluster.ServiceCIDR{Name: "more"}})
	if got := cidrs(); len(got) != 0 {
		t.Errorf("all deleted: %v, want none", got)
	}
}
