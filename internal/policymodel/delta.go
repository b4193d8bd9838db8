package policymodel

import (
	"fmt"
	"slices"
)

// Delta is what one change did to the model: the nftables side applies it
// in one transaction (new sets with their elements, then the elements, then
// the rules if Rules, then the deletion of DelSets, which no rule uses any
// more).
type Delta struct {
	// Rules reports whether the tiers changed (a policy came, went or
	// changed): the model's Ingress and Egress are the new ones.
	Rules   bool
	AddSets []SetID // new sets; their elements are the model's
	DelSets []SetID
	// Add and Del are the elements that came to and left sets that were
	// there before.
	Add, Del map[SetID][]Elem
	// Issues reports whether the model's Issues changed.
	Issues bool
}

// Empty reports whether the change changed nothing.
func (d *Delta) Empty() bool {
	return !d.Rules && !d.Issues && len(d.AddSets)+len(d.DelSets)+len(d.Add)+len(d.Del) == 0
}

// Note records that e came to (add) or left set id.
func (d *Delta) Note(id SetID, e Elem, add bool) {
	m := &d.Del
	if add {
		m = &d.Add
	}
	if *m == nil {
		*m = map[SetID][]Elem{}
	}
	(*m)[id] = append((*m)[id], e)
}

// Merge appends o, a change that came after d, to d, so that the two are
// one change from what was there before d: a set removed drops its
// element changes, a set made (or removed and made again) is written
// whole from the model, and an element added and then removed (or the
// other way) is no change at all.
func (d *Delta) Merge(o Delta) {
	d.Rules = d.Rules || o.Rules
	d.Issues = d.Issues || o.Issues
	for _, id := range o.DelSets {
		d.AddSets = without(d.AddSets, id)
		delete(d.Add, id)
		delete(d.Del, id)
		d.DelSets = with(d.DelSets, id)
	}
	for _, id := range o.AddSets {
		d.DelSets = without(d.DelSets, id) // made again: written whole
		delete(d.Add, id)
		delete(d.Del, id)
		d.AddSets = with(d.AddSets, id)
	}
	for id, es := range o.Add {
		for _, x := range es {
			if !slices.Contains(d.AddSets, id) && !cancel(d.Del, id, x) {
				d.Note(id, x, true)
			}
		}
	}
	for id, es := range o.Del {
		for _, x := range es {
			if !slices.Contains(d.AddSets, id) && !cancel(d.Add, id, x) {
				d.Note(id, x, false)
			}
		}
	}
}

// with is ids with id, sorted.
func with(ids []SetID, id SetID) []SetID {
	i, found := slices.BinarySearch(ids, id)
	if found {
		return ids
	}
	return slices.Insert(ids, i, id)
}

// without is ids without id.
func without(ids []SetID, id SetID) []SetID {
	if i := slices.Index(ids, id); i >= 0 {
		return slices.Delete(ids, i, i+1)
	}
	return ids
}

// cancel removes x from m[id] and reports whether it was there.
func cancel(m map[SetID][]Elem, id SetID, x Elem) bool {
	i := slices.Index(m[id], x)
	if i < 0 {
		return false
	}
	m[id] = slices.Delete(m[id], i, i+1)
	if len(m[id]) == 0 {
		delete(m, id)
	}
	return true
}

// ErrUnexpressible is what every Issue wraps: the API accepted a policy (or
// an older API server or a CRD without validation let it through) that the
// engine cannot express.
const ErrUnexpressible = unexpressible("policy cannot be expressed")

// unexpressible is ErrUnexpressible's type: a constant, so that no error
// value is made when a CNI call starts (TestNoInitCode).
type unexpressible string

func (e unexpressible) Error() string { return string(e) }

// Issue is one part of a policy the engine could not express, and what it
// did instead (always the closed form: an allow that matches nothing, a
// deny that matches everything, a subject widened to every pod it could
// select). The watcher logs it and records an Event on the policy.
type Issue struct {
	Policy string // the policy's ID ("np/<ns>/<name>", "cnp/<name>"); "ns/<ns>": a namespace past its caps
	Field  string // the field's path, as the API names it ("spec.ingress[0].from[1].ipBlock.cidr")
	Value  string
	Reason string // what is wrong and what the engine did instead
}

func (i Issue) Error() string {
	return fmt.Sprintf("%s: %s %q: %s", i.Policy, i.Field, i.Value, i.Reason)
}

// Unwrap makes errors.Is(issue, ErrUnexpressible) hold.
func (i Issue) Unwrap() error { return ErrUnexpressible }
