package netops_test

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
)

// TestRules: EnsureRule adds an IPv4 and an IPv6 rule once each, FreeTable
// skips the tables they look up, DeleteRule removes them and a second
// DeleteRule is no error.
func TestRules(t *testing.T) {
	h := openNS(t, "rules")
	rules := []netops.Rule{
		{Src: netip.MustParsePrefix("10.63.0.2/32"), Table: 100},
		{Src: netip.MustParsePrefix("fd63::2/128"), Table: 101},
	}
	count := func() (n int) {
		t.Helper()
		have, err := h.Rules()
		must(t, err)
		for _, r := range have {
			for _, w := range rules {
				if r.Src == w.Src && r.Table == w.Table {
					n++
				}
			}
		}
		return n
	}
	for i := 0; i < 2; i++ {
		for _, r := range rules {
			must(t, h.EnsureRule(r))
		}
	}
	if n := count(); n != 2 {
		t.Fatalf("%d matching rules after EnsureRule twice, want 2", n)
	}
	if got, err := h.FreeTable(100); err != nil || got != 102 {
		t.Errorf("FreeTable(100) = %d, %v; want 102", got, err)
	}
	for i := 0; i < 2; i++ {
		for _, r := range rules {
			must(t, h.DeleteRule(r))
		}
	}
	if n := count(); n != 0 {
		t.Errorf("%d rules left after DeleteRule", n)
	}
	if got, err := h.FreeTable(100); err != nil || got != 100 {
		t.Errorf("FreeTable(100) after the deletes = %d, %v; want 100", got, err)
	}
}
