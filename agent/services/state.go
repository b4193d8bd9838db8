package services

import (
	"cmp"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// resolvedService is a Service's ports as last resolved.
type resolvedService struct {
	key   svcKey
	ports []svcmodel.ServicePort
}

// svcKey names a Service.
type svcKey struct{ ns, name string }

func (k svcKey) compare(o svcKey) int {
	return cmp.Or(cmp.Compare(k.ns, o.ns), cmp.Compare(k.name, o.name))
}

// State is the Services and EndpointSlices the watcher has seen and this
// node, each Service resolved again only when it, one of its slices or
// the node changed (kube-proxy's change trackers), so that a change to
// one Service costs that Service's resolution. Safe for concurrent use;
// the informers' handlers write it, the syncer reads it.
type State struct {
	mu       sync.Mutex
	node     Node
	services map[svcKey]*cluster.Service
	slices   map[svcKey]map[string]*cluster.EndpointSlice // by the Service they name, by slice name
	owner    map[svcKey]svcKey                            // a slice's Service (the slice's namespace/name)
	// resolved are the Services that serve ports, sorted by key (a
	// slice, not a map: the snapshot walks it whole at each change).
	resolved []resolvedService
	dirty    map[svcKey]struct{}
	allDirty bool
	// triggers are the trigger times of the slices changed since the
	// last snapshot (network programming latency).
	triggers              []time.Time
	svcChanges, epChanges int // since the last snapshot
	last                  *svcmodel.Snapshot
	seq                   uint64 // of last
	notify                func()
}

// NewState returns an empty state; notify (nil: none) is called after
// each change, outside the state's lock.
func NewState(notify func()) *State {
	if notify == nil {
		notify = func() {}
	}
	return &State{services: map[svcKey]*cluster.Service{}, slices: map[svcKey]map[string]*cluster.EndpointSlice{},
		owner: map[svcKey]svcKey{}, dirty: map[svcKey]struct{}{},
		last: &svcmodel.Snapshot{}, notify: notify}
}

// SetNode sets this node's name and zone: a change resolves every
// Service again.
func (s *State) SetNode(n Node) {
	s.mu.Lock()
	if s.node == n {
		s.mu.Unlock()
		return
	}
	s.node, s.allDirty = n, true
	s.mu.Unlock()
	s.notify()
}

// Touch asks for a sync though no Service changed (the node's addresses
// did: the NodePort addresses are read at each sync).
func (s *State) Touch() { s.notify() }

// SetService adds or replaces svc.
func (s *State) SetService(svc *cluster.Service) {
	k := svcKey{svc.Namespace, svc.Name}
	s.mu.Lock()
	s.services[k] = svc
	s.dirty[k] = struct{}{}
	s.svcChanges++
	s.mu.Unlock()
	s.notify()
}

// DeleteService removes the Service namespace/name.
func (s *State) DeleteService(namespace, name string) {
	k := svcKey{namespace, name}
	s.mu.Lock()
	delete(s.services, k)
	s.dirty[k] = struct{}{}
	s.svcChanges++
	s.mu.Unlock()
	s.notify()
}

// SetSlice adds or replaces es (a slice that names another Service than
// before moves to it).
func (s *State) SetSlice(es *cluster.EndpointSlice) {
	sk := svcKey{es.Namespace, es.Name}
	s.mu.Lock()
	s.dropSlice(sk)
	k := svcKey{es.Namespace, es.Service}
	if es.Service != "" {
		if s.slices[k] == nil {
			s.slices[k] = map[string]*cluster.EndpointSlice{}
		}
		s.slices[k][es.Name] = es
		s.owner[sk] = k
		s.dirty[k] = struct{}{}
	}
	if !es.TriggerTime.IsZero() {
		s.triggers = append(s.triggers, es.TriggerTime)
	}
	s.epChanges++
	s.mu.Unlock()
	s.notify()
}

// DeleteSlice removes the slice namespace/name.
func (s *State) DeleteSlice(namespace, name string) {
	s.mu.Lock()
	s.dropSlice(svcKey{namespace, name})
	s.epChanges++
	s.mu.Unlock()
	s.notify()
}

// dropSlice removes the slice sk from its Service's (s.mu held).
func (s *State) dropSlice(sk svcKey) {
	k, ok := s.owner[sk]
	if !ok {
		return
	}
	delete(s.owner, sk)
	delete(s.slices[k], sk.name)
	if len(s.slices[k]) == 0 {
		delete(s.slices, k)
	}
	s.dirty[k] = struct{}{}
}

// Pending reports whether a change came since the last snapshot.
func (s *State) Pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allDirty || len(s.dirty) > 0
}

// changes is what a snapshot took in since the one before.
type changes struct {
	services, endpoints int
	triggers            []time.Time
}

// mergeDirty is how many dirty Services snapshot resolves one by one,
// each found (and inserted) in the sorted list; more are sorted and
// merged with it in one pass (resolveMerge): inserting a first sync's
// 10,000 Services one by one moved ~25 million entries.
const mergeDirty = 64

// resolveMerge resolves every dirty Service in one sorted pass over
// s.resolved, empties s.dirty and returns the Services that changed.
func (s *State) resolveMerge() []svcmodel.ServiceName {
	keys := make([]svcKey, 0, len(s.dirty))
	for k := range s.dirty {
		keys = append(keys, k)
	}
	clear(s.dirty)
	slices.SortFunc(keys, svcKey.compare)
	var changed []svcmodel.ServiceName
	out := make([]resolvedService, 0, len(s.resolved)+len(keys))
	j := 0
	for _, k := range keys {
		for j < len(s.resolved) && s.resolved[j].key.compare(k) < 0 {
			out = append(out, s.resolved[j])
			j++
		}
		var old []svcmodel.ServicePort
		if j < len(s.resolved) && s.resolved[j].key == k {
			old = s.resolved[j].ports
			j++
		}
		ports := resolveService(s.services[k], s.sliceList(k), s.node)
		if reflect.DeepEqual(ports, old) {
			if len(old) > 0 {
				out = append(out, resolvedService{k, old})
			}
			continue
		}
		changed = append(changed, svcmodel.ServiceName{Namespace: k.ns, Name: k.name})
		if len(ports) > 0 {
			out = append(out, resolvedService{k, ports})
		}
	}
	s.resolved = append(out, s.resolved[j:]...)
	return changed
}

// snapshot resolves what changed and returns the ports of every Service
// (NodePortAddrs and ClusterCIDRs are the syncer's), the same Snapshot as
// last time when nothing changed.
func (s *State) snapshot() (*svcmodel.Snapshot, changes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := changes{services: s.svcChanges, endpoints: s.epChanges, triggers: s.triggers}
	s.svcChanges, s.epChanges, s.triggers = 0, 0, nil
	if !s.allDirty && len(s.dirty) == 0 {
		return s.last, ch
	}
	partial := !s.allDirty
	if s.allDirty {
		for k := range s.services {
			s.dirty[k] = struct{}{}
		}
		for _, r := range s.resolved {
			s.dirty[r.key] = struct{}{}
		}
		s.allDirty = false
	}
	var changed []svcmodel.ServiceName
	if len(s.dirty) > mergeDirty {
		changed = s.resolveMerge()
	}
	for k := range s.dirty {
		ports := resolveService(s.services[k], s.sliceList(k), s.node)
		i, found := slices.BinarySearchFunc(s.resolved, k, func(r resolvedService, k svcKey) int { return r.key.compare(k) })
		var old []svcmodel.ServicePort
		if found {
			old = s.resolved[i].ports
		}
		if reflect.DeepEqual(ports, old) {
			continue // (an update that changes nothing the proxy reads)
		}
		changed = append(changed, svcmodel.ServiceName{Namespace: k.ns, Name: k.name})
		switch {
		case len(ports) == 0: // (found: old differs)
			s.resolved = slices.Delete(s.resolved, i, i+1)
		case found:
			s.resolved[i].ports = ports
		default:
			s.resolved = slices.Insert(s.resolved, i, resolvedService{k, ports})
		}
	}
	clear(s.dirty)
	if len(changed) == 0 {
		return s.last, ch
	}
	s.seq++
	// Each Service's ports are a run of the snapshot, shared with the
	// snapshots before it (resolveService made them; nobody changes them).
	out := &svcmodel.Snapshot{Parts: make([][]svcmodel.ServicePort, len(s.resolved)), Seq: s.seq, Partial: partial, Changed: changed}
	for i, r := range s.resolved {
		out.Parts[i] = r.ports
	}
	s.last = out
	return out, ch
}

// sliceList is the slices of the Service k, by name (s.mu held).
func (s *State) sliceList(k svcKey) []*cluster.EndpointSlice {
	m := s.slices[k]
	out := make([]*cluster.EndpointSlice, 0, len(m))
	for _, es := range m {
		out = append(out, es)
	}
	slices.SortFunc(out, func(a, b *cluster.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
