package svcmodel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// portsOf are ServicePorts of the Services namespace/name given, each
// name a Service of as many ports as it is given times, in order.
func portsOf(names ...string) []ServicePort {
	var out []ServicePort
	for i, n := range names {
		ns, name, _ := cutSlash(n)
		out = append(out, ServicePort{Name: PortName{Namespace: ns, Name: name, Port: fmt.Sprint(i)}})
	}
	return out
}

func cutSlash(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

// names are the ports' Port names, in the order All yields them.
func names(seq func(func(*ServicePort) bool)) []string {
	var out []string
	for p := range seq {
		out = append(out, p.Name.Port)
	}
	return out
}

// TestSnapshotParts: a snapshot whose ports are in Ports, in runs of
// Parts (one Service each, as the watcher makes them, or runs that cut a
// Service in two, with empty runs between), or both, reads the same:
// Len, All in order, Service for each Service (first, last, one cut
// across runs) and for Services it does not have (before, between and
// after the others).
func TestSnapshotParts(t *testing.T) {
	flat := portsOf("a/x", "a/x", "b/y", "c/z", "c/z", "c/z", "d/w")
	all := names(func(yield func(*ServicePort) bool) {
		for i := range flat {
			if !yield(&flat[i]) {
				return
			}
		}
	})
	for _, c := range []struct {
		name string
		snap *Snapshot
	}{
		{"flat", &Snapshot{Ports: flat}},
		{"a run per Service", &Snapshot{Parts: [][]ServicePort{flat[0:2], flat[2:3], flat[3:6], flat[6:7]}}},
		{"runs that cut Services", &Snapshot{Parts: [][]ServicePort{flat[0:1], nil, flat[1:4], flat[4:5], {}, flat[5:7]}}},
		{"Ports then Parts", &Snapshot{Ports: flat[0:3], Parts: [][]ServicePort{flat[3:5], flat[5:7]}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if n := c.snap.Len(); n != len(flat) {
				t.Errorf("Len %d, want %d", n, len(flat))
			}
			if got := names(c.snap.All()); !slices.Equal(got, all) {
				t.Errorf("All yields %v, want %v", got, all)
			}
			if got := c.snap.Flat(); len(got) != len(flat) || got[3].Name != flat[3].Name {
				t.Errorf("Flat %v, want %v", got, flat)
			}
			for sn, want := range map[ServiceName][]string{
				{"a", "x"}: {"0", "1"}, {"b", "y"}: {"2"}, {"c", "z"}: {"3", "4", "5"}, {"d", "w"}: {"6"},
				{"a", "a"}: nil, {"b", "z"}: nil, {"c", "a"}: nil, {"e", "x"}: nil, {"", ""}: nil,
			} {
				if got := names(c.snap.Service(sn)); !slices.Equal(got, want) {
					t.Errorf("Service(%v) yields %v, want %v", sn, got, want)
				}
			}
			// stopping early stops
			n := 0
			for range c.snap.Service(ServiceName{"c", "z"}) {
				n++
				break
			}
			if n != 1 {
				t.Errorf("Service ran on after a break: %d", n)
			}
		})
	}
	var none *Snapshot
	if none.Len() != 0 || len(names(none.All())) != 0 || len(names(none.Service(ServiceName{"a", "x"}))) != 0 {
		t.Error("a nil snapshot has ports")
	}
}

// TestSnapshotSamePorts: a copy of a snapshot (other addresses, the same
// runs) holds the same ports; a snapshot of equal but other runs, or one
// run replaced, does not.
func TestSnapshotSamePorts(t *testing.T) {
	x, y := portsOf("a/x"), portsOf("b/y")
	s := &Snapshot{Parts: [][]ServicePort{x, y}}
	cp := *s
	cp.NodePortAddrs = nil
	if !s.SamePorts(&cp) {
		t.Error("a copy of a snapshot does not hold the same ports")
	}
	if !s.SamePorts(&Snapshot{Parts: [][]ServicePort{x, y}}) {
		t.Error("a snapshot of the same runs does not hold the same ports")
	}
	for name, o := range map[string]*Snapshot{
		"equal runs":      {Parts: [][]ServicePort{portsOf("a/x"), portsOf("b/y")}},
		"one replaced":    {Parts: [][]ServicePort{x, portsOf("b/y")}},
		"one run less":    {Parts: [][]ServicePort{x}},
		"flat":            {Ports: append(slices.Clone(x), y...)},
		"nil":             nil,
		"no ports at all": {},
	} {
		if s.SamePorts(o) {
			t.Errorf("%s: SamePorts true", name)
		}
	}
	flat := &Snapshot{Ports: x}
	if !flat.SamePorts(&Snapshot{Ports: x}) || flat.SamePorts(&Snapshot{Ports: slices.Clone(x)}) {
		t.Error("flat snapshots: SamePorts by the slice")
	}
}

// TestSnapshotServiceRandomRuns: for random cuts of a sorted list into
// runs (empty ones among them), Service yields what a walk of the whole
// list finds, for every Service and for names between them.
func TestSnapshotServiceRandomRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var list []string
	for i := range 40 {
		for range 1 + rng.IntN(3) {
			list = append(list, fmt.Sprintf("n%d/s%02d", i%3, i))
		}
	}
	slices.SortStableFunc(list, strings.Compare)
	flat := portsOf(list...)
	var asked []ServiceName
	for i := range 45 {
		for ns := range 4 {
			asked = append(asked, ServiceName{fmt.Sprintf("n%d", ns), fmt.Sprintf("s%02d", i)})
		}
	}
	for round := range 300 {
		var parts [][]ServicePort
		for i := 0; i < len(flat); {
			if rng.IntN(4) == 0 {
				parts = append(parts, nil)
			}
			k := min(len(flat), i+1+rng.IntN(5))
			parts = append(parts, flat[i:k])
			i = k
		}
		s := &Snapshot{Parts: parts}
		for _, sn := range asked {
			var want []string
			for _, p := range flat {
				if p.Name.Namespace == sn.Namespace && p.Name.Name == sn.Name {
					want = append(want, p.Name.Port)
				}
			}
			if got := names(s.Service(sn)); !slices.Equal(got, want) {
				t.Fatalf("round %d: Service(%v) yields %v, want %v", round, sn, got, want)
			}
		}
	}
}
