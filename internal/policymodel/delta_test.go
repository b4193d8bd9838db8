package policymodel

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// table is what a kernel holds of a model's sets: elements by set.
type table map[SetID]map[Elem]bool

// apply applies d to t as the nftables side does, with m the model after
// d (a made set is written whole from it), and returns what the kernel
// would refuse: an element added to or removed from a set it does not
// have, an element removed that is not there, a set made twice.
func (t table) apply(d Delta, m map[SetID]map[Elem]bool) error {
	for _, id := range d.AddSets {
		if m[id] == nil {
			return fmt.Errorf("set %s made but not in the model", id)
		}
		t[id] = maps.Clone(m[id])
	}
	for _, ch := range []struct {
		elems map[SetID][]Elem
		add   bool
	}{{d.Add, true}, {d.Del, false}} {
		for id, es := range ch.elems {
			if slices.Contains(d.AddSets, id) {
				continue // written whole
			}
			if t[id] == nil {
				if m[id] == nil {
					continue // a set gone: the sink skips it
				}
				return fmt.Errorf("element of set %s, which the kernel does not have", id)
			}
			for _, e := range es {
				if !ch.add && !t[id][e] {
					return fmt.Errorf("%s removed from %s, which does not hold it", e, id)
				}
				if ch.add {
					t[id][e] = true
				} else {
					delete(t[id], e)
				}
			}
		}
	}
	for _, id := range d.DelSets {
		delete(t, id)
	}
	return nil
}

// TestDeltaMerge: any run of changes merged into one delta leaves the
// kernel as the model is, as applying them one by one does, and asks
// nothing the kernel would refuse (the Sink commits what was queued while
// its last transaction ran as one).
func TestDeltaMerge(t *testing.T) {
	ids := []SetID{"sa", "sb", "sc"}
	elems := make([]Elem, 6)
	for i := range elems {
		elems[i] = AddrElem(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}))
	}
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 1))
		model := map[SetID]map[Elem]bool{"sa": {elems[0]: true}}
		kernel := table{"sa": {elems[0]: true}}
		var merged Delta
		steps := 1 + r.IntN(12)
		var log []string
		for range steps {
			var d Delta
			id := ids[r.IntN(len(ids))]
			switch {
			case model[id] == nil: // make it, with some elements
				model[id] = map[Elem]bool{}
				for range r.IntN(3) {
					model[id][elems[r.IntN(len(elems))]] = true
				}
				d.AddSets = []SetID{id}
			case r.IntN(5) == 0:
				delete(model, id)
				d.DelSets = []SetID{id}
			default: // elements come and go, each noted once
				for _, i := range r.Perm(len(elems))[:1+r.IntN(3)] {
					e := elems[i]
					add := !model[id][e]
					if add {
						model[id][e] = true
					} else {
						delete(model[id], e)
					}
					d.Note(id, e, add)
				}
			}
			log = append(log, fmt.Sprintf("%+v", d))
			merged.Merge(d)
		}
		if err := kernel.apply(merged, model); err != nil {
			t.Fatalf("seed %d: %v\nsteps: %v\nmerged: %+v", seed, err, log, merged)
		}
		if !maps.EqualFunc(kernel, table(model), maps.Equal) {
			t.Fatalf("seed %d: the kernel holds %v, the model %v\nsteps: %v\nmerged: %+v", seed, kernel, model, log, merged)
		}
	}
}

// TestDeltaMergeCancels: an element added and removed again before a
// commit leaves an empty delta.
func TestDeltaMergeCancels(t *testing.T) {
	e := AddrElem(netip.MustParseAddr("10.0.0.1"))
	var d, add, del Delta
	add.Note("sa", e, true)
	del.Note("sa", e, false)
	d.Merge(add)
	d.Merge(del)
	if !d.Empty() {
		t.Errorf("added then removed: %+v, want an empty delta", d)
	}
}
