package svcmodel

import (
	"cmp"
	"iter"
	"slices"
)

// A Snapshot's ServicePorts are in Ports (one slice) or in Parts (runs of
// one slice, in order): the watcher keeps each Service's ports as a run
// and shares the runs between its snapshots, so that a change of one
// Service of 30,000 copies 30,000 slice headers (720 KB), not 30,000
// ServicePorts (5.7 MB: with the agent's GC headroom, 10% of a 170 MB
// heap at 30,000 Services, a collection of the whole heap every third
// change). Read them with Len, All and Service, never Ports alone.

// Len is the number of the snapshot's ServicePorts.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	n := len(s.Ports)
	for _, p := range s.Parts {
		n += len(p)
	}
	return n
}

// All yields the snapshot's ServicePorts in order (sorted by Name then
// Family): Ports, then Parts'. The pointers are into the snapshot, which
// no one changes.
func (s *Snapshot) All() iter.Seq[*ServicePort] {
	return func(yield func(*ServicePort) bool) {
		if s == nil {
			return
		}
		for i := range s.Ports {
			if !yield(&s.Ports[i]) {
				return
			}
		}
		for _, p := range s.Parts {
			for i := range p {
				if !yield(&p[i]) {
					return
				}
			}
		}
	}
}

// Service yields the ServicePorts of the Service n, in order; each run
// is found by binary search.
func (s *Snapshot) Service(n ServiceName) iter.Seq[*ServicePort] {
	return func(yield func(*ServicePort) bool) {
		if s == nil {
			return
		}
		if !yieldService(s.Ports, n, yield) {
			return
		}
		for i := firstRun(s.Parts, n); i < len(s.Parts); i++ {
			p := s.Parts[i]
			if len(p) == 0 {
				continue
			}
			if compareService(&p[0], n) > 0 || !yieldService(p, n, yield) {
				return
			}
		}
	}
}

// firstRun is where n's ports may begin in parts: the first non-empty
// run whose last port is not before n, or an empty run before it (n's
// ports may continue into the runs after). Empty runs say nothing: the
// search steps over them.
func firstRun(parts [][]ServicePort, n ServiceName) int {
	lo, hi := 0, len(parts)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		j := mid
		for j < hi && len(parts[j]) == 0 {
			j++
		}
		if j < hi && compareService(&parts[j][len(parts[j])-1], n) < 0 {
			lo = j + 1
		} else {
			hi = mid // (parts[mid:j] are empty: the answer is before mid, or j)
		}
	}
	return lo
}

// yieldService yields the ports of n in ps (sorted); false: yield said
// stop.
func yieldService(ps []ServicePort, n ServiceName, yield func(*ServicePort) bool) bool {
	i, _ := slices.BinarySearchFunc(ps, n, func(p ServicePort, n ServiceName) int { return compareService(&p, n) })
	for ; i < len(ps) && compareService(&ps[i], n) == 0; i++ {
		if !yield(&ps[i]) {
			return false
		}
	}
	return true
}

// compareService orders a ServicePort's Service against n.
func compareService(p *ServicePort, n ServiceName) int {
	return cmp.Or(cmp.Compare(p.Name.Namespace, n.Namespace), cmp.Compare(p.Name.Name, n.Name))
}

// SamePorts reports whether s and o hold the very same ServicePorts: the
// same slices (a snapshot handed on unchanged, or a copy of it with
// other addresses), not equal ones.
func (s *Snapshot) SamePorts(o *Snapshot) bool {
	if s == nil || o == nil {
		return s == o
	}
	if len(s.Ports) != len(o.Ports) || len(s.Parts) != len(o.Parts) {
		return false
	}
	if len(s.Ports) > 0 && &s.Ports[0] != &o.Ports[0] {
		return false
	}
	if len(s.Parts) > 0 && &s.Parts[0] == &o.Parts[0] {
		return true // (one snapshot's runs: the watcher makes new ones for each)
	}
	// Parts are shared run by run: the same runs at the same places
	for i, p := range s.Parts {
		q := o.Parts[i]
		if len(p) != len(q) || len(p) > 0 && &p[0] != &q[0] {
			return false
		}
	}
	return true
}

// Flat is a copy of the snapshot's ServicePorts in one slice (tests, and
// readers that want an index).
func (s *Snapshot) Flat() []ServicePort {
	out := make([]ServicePort, 0, s.Len())
	for p := range s.All() {
		out = append(out, *p)
	}
	return out
}
