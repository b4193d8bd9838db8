package policynft

import (
	"net/netip"
	"sync"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The DNS proxy asks Permit before it forwards each query of a domainNames
// subject, and each answer is an evaluation of the pod's egress rules: a
// large policy of its namespace made one cost 1.3-2 s, under the
// watcher's lock until it was read from the last model (issue 60, finding
// 5). permits evaluates a pod's queries one at a time (its others wait
// for it; no other pod's do) and caches each verdict per (pod, server,
// protocol) for the model's generation, so a pod's A and AAAA, and its
// resolver's retries, cost one evaluation until the model changes.

// permitCacheMax bounds the cache of one generation: past it, it starts
// again.
const permitCacheMax = 4096

type permitKey struct {
	pod    netip.Addr
	server netip.AddrPort
	proto  policymodel.Protocol
}

// permits caches Permit's verdicts; safe for concurrent use.
type permits struct {
	mu    sync.Mutex
	gen   uint64 // the model generation of the cache
	cache map[permitKey]*permit
	slots map[netip.Addr]chan struct{} // a pod's evaluation under way
	// beforeEval, if set (tests), runs before each evaluation.
	beforeEval func()
}

// permit is one verdict: known once done is closed.
type permit struct {
	done chan struct{}
	ok   bool
}

// allowed reports whether m's egress rules let k's pod send to its server.
func (p *permits) allowed(m *policymodel.Model, k permitKey) bool {
	p.mu.Lock()
	if p.cache == nil || p.gen != m.Generation {
		p.cache, p.gen = map[permitKey]*permit{}, m.Generation
	}
	if e := p.cache[k]; e != nil {
		p.mu.Unlock()
		<-e.done
		return e.ok
	}
	e := &permit{done: make(chan struct{})}
	if len(p.cache) >= permitCacheMax {
		clear(p.cache)
	}
	p.cache[k] = e
	if p.slots == nil {
		p.slots = map[netip.Addr]chan struct{}{}
	}
	slot := p.slots[k.pod]
	if slot == nil {
		slot = make(chan struct{}, 1)
		p.slots[k.pod] = slot
	}
	hook := p.beforeEval
	p.mu.Unlock()

	slot <- struct{}{}
	if hook != nil {
		hook()
	}
	e.ok = m.Evaluate(policymodel.Egress, policymodel.Conn{Src: k.pod, Dst: k.server.Addr(), Proto: k.proto, Port: k.server.Port()}).Allowed
	<-slot
	close(e.done)
	return e.ok
}

// forget drops pod's slot: it left the DNS sets.
func (p *permits) forget(pod netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.slots, pod)
}
