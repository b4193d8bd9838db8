package netops_test

import (
	"testing"

	"github.com/cnibox/cnibox/netops"
)

// TestMarkLocal: EnsureMarkLocal puts one rule and one local default
// route per family in place, twice or not; another priority replaces the
// rule; DeleteMarkLocal removes them, twice or not, and leaves a rule of
// another table alone.
func TestMarkLocal(t *testing.T) {
	h := openNS(t, "mloc")
	r := netops.MarkLocal{Mark: 0x04000000, Table: 53053, Priority: 100}
	other := netops.MarkLocal{Mark: 0x04000000, Table: 53054, Priority: 101}
	state := func(r netops.MarkLocal, rules, others, routes int) {
		t.Helper()
		a, b, c, err := h.MarkLocalState(r)
		must(t, err)
		if a != rules || b != others || c != routes {
			t.Errorf("%s: %d rules, %d at other priorities, %d routes; want %d, %d, %d", r, a, b, c, rules, others, routes)
		}
	}
	state(r, 0, 0, 0)
	must(t, h.EnsureMarkLocal(other))
	for range 2 {
		must(t, h.EnsureMarkLocal(r))
		state(r, 2, 0, 2)
	}
	moved := r
	moved.Priority = 90
	must(t, h.EnsureMarkLocal(moved))
	state(moved, 2, 0, 2)
	for range 2 {
		must(t, h.DeleteMarkLocal(moved))
		state(moved, 0, 0, 0)
	}
	state(other, 2, 0, 2)
	if err := h.EnsureMarkLocal(netops.MarkLocal{Mark: 0, Table: 53053, Priority: 100}); err == nil {
		t.Errorf("EnsureMarkLocal without a mark: no error")
	}
	if err := h.EnsureMarkLocal(netops.MarkLocal{Mark: 1, Table: 254, Priority: 100}); err == nil {
		t.Errorf("EnsureMarkLocal into the main table: no error")
	}
}
