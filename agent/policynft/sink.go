// Package policynft is the kernel side of cnibox-agent's NetworkPolicy
// engine: the one syncer of the policy table, a policy.Sink that queues
// the model's changes (policymodel.Delta), commits what is queued as one
// transaction on netops/nft's policy table whenever the last is done,
// replaces the whole table on a period, and keeps the numbers the agent's
// metrics show.
package policynft

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
)

// Sink applies the model to the policy table of one namespace (the node's).
// It is safe for concurrent use. Apply queues each change; until Run
// starts, Apply commits it at once (the first full sync, tests), and from
// then on Run's goroutine commits what was queued, as one transaction,
// whenever the last one is done (syncer.go).
type Sink struct {
	mu     sync.Mutex // the nftables handle, stats, rules
	h      *nft.Handle
	synced atomic.Bool // a full sync is in the kernel
	stats  Stats
	rules  map[string]ruleInfo // by counter name
	// live: the addresses the last transaction placed (localAddrs); those
	// the next model no longer has are closed (nft.PolicyChange.Closed).
	live []netip.Addr
	// index: record the store's policy index in indexDir (IndexTo).
	index    bool
	indexDir string

	qmu   sync.Mutex // q, async, done, doneCh
	q     queue
	async bool          // Run is committing
	kick  chan struct{} // Run's wake-up (one pending at most)
	// done is the number of the last change committed; doneCh is closed
	// (and replaced) whenever it moves (Wait).
	done   uint64
	doneCh chan struct{}
	resync time.Duration // ResyncEvery
	// beforeCommit, if set (tests), runs before each transaction, outside
	// every lock.
	beforeCommit func()
	// dns, if set (WithDNS), follows the model's domainNames peers.
	dns *DNS
}

// WithDNS has the Sink keep d's DNS table to each model it is handed, and
// hand d the watcher's model once it runs (domainNames: dns.go). Call it
// before the first Apply.
func (s *Sink) WithDNS(d *DNS) { s.dns = d }

// Stats are the Sink's numbers for the agent's metrics.
type Stats struct {
	Rules, Sets int           // model rules and sets of the last change
	Changes     int           // changes handed to Apply (counted by the queue: Apply never waits for a transaction)
	Applied     int           // transactions committed
	Failed      int           // transactions the kernel refused
	Resyncs     int           // periodic full syncs committed (ResyncEvery)
	IndexErr    error         // the last failure to record the store's index
	LastSync    time.Duration // the last transaction's time
}

// New returns a Sink on the namespace at nsPath ("" for the caller's).
func New(nsPath string) (*Sink, error) {
	h, err := nft.Open(nsPath)
	if err != nil {
		return nil, err
	}
	return &Sink{h: h, kick: make(chan struct{}, 1), doneCh: make(chan struct{})}, nil
}

// Close closes the nftables connection; the table stays (fail closed: the
// kernel enforces the last rules while the agent is away).
func (s *Sink) Close() error { return s.h.Close() }

// Stats returns the Sink's numbers.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	s.qmu.Lock()
	st.Changes = int(s.q.n)
	s.qmu.Unlock()
	return st
}

// Apply takes d, the change that made m, and queues it. Called with the
// model's lock held (m is valid during the call only). The first
// transaction replaces the whole table (what an earlier agent left is
// kept until then); later ones change what the queued deltas say. Until
// Run starts, Apply commits before it returns, and returns the commit's
// error; then it only queues (Run logs a failure and recovers).
func (s *Sink) Apply(m *policymodel.Model, d policymodel.Delta) error {
	var dnsErr error
	if s.dns != nil {
		dnsErr = s.dns.observe(m)
	}
	if err := s.apply(m, d); err != nil {
		return err
	}
	return dnsErr
}

func (s *Sink) apply(m *policymodel.Model, d policymodel.Delta) error {
	s.qmu.Lock()
	s.q.merge(d)
	async := s.async
	s.qmu.Unlock()
	if async {
		s.wake()
		return nil
	}
	return s.sync(func(f func(*policymodel.Model) bool) { f(m) }, false) // committed before Apply returns
}

// localAddrs are the addresses of the node's pods the model knows and
// places (not host-network, not done: a done pod's address may already be
// a new pod's, still pending): they leave the pending set.
func localAddrs(m *policymodel.Model) []netip.Addr {
	var out []netip.Addr
	for _, p := range m.LocalPods {
		if !p.HostNetwork && !p.Done {
			out = append(out, p.IPs...)
		}
	}
	return out
}

// closed are the addresses of was that now does not hold: pods of the node
// that left the API (force-deleted ones may still run) or finished, whose
// addresses stay closed until their DEL (nft.PolicyChange.Closed).
func closed(was, now []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range was {
		if !slices.Contains(now, a) {
			out = append(out, a)
		}
	}
	return out
}

func countRules(r *policymodel.Rules) int {
	n := 0
	for _, p := range r.Policies() {
		n += len(p.Rules)
	}
	return n
}

// Change is the table's change for d on model m; full makes it a full sync
// (every set and the rules, the rest of the table deleted). It holds m's
// rules and sets as they are: valid while m is (detach copies them; a
// model the engine handed out never changes).
func Change(m *policymodel.Model, d policymodel.Delta, full bool) *nft.PolicyChange {
	c := &nft.PolicyChange{Full: full}
	if full || d.Rules {
		c.Rules = &m.Rules
		c.Guard = Guard(m)
	}
	ids := d.AddSets
	if full {
		ids = make([]policymodel.SetID, 0, len(m.Sets))
		for id := range m.Sets {
			ids = append(ids, id)
		}
	}
	added := map[policymodel.SetID]bool{}
	for _, id := range ids {
		if set := m.Sets[id]; set != nil {
			c.Sets = append(c.Sets, set)
			added[id] = true
		}
	}
	if !full {
		c.DelSets = slices.Clone(d.DelSets)
	}
	elems := func(ch map[policymodel.SetID][]policymodel.Elem) []*policymodel.Set {
		var out []*policymodel.Set
		for id, es := range ch {
			set := m.Sets[id]
			if set == nil || added[id] {
				continue
			}
			if set.Kind == policymodel.CIDRs {
				// An interval set is rewritten whole.
				c.Sets = append(c.Sets, set)
				added[id] = true
				continue
			}
			out = append(out, policymodel.NewSet(id, set.Kind, set.Key, es...))
		}
		return out
	}
	if !full {
		c.Add, c.Del = elems(d.Add), elems(d.Del)
	}
	return c
}

// Guard is where the cluster's policies could select a pod of this node
// (those that select none here yet included): the namespaces of the
// NetworkPolicies, every namespace if there is a ClusterNetworkPolicy
// (whose namespace selectors a CNI ADD cannot evaluate).
func Guard(m *policymodel.Model) *nft.PolicyGuard {
	return &nft.PolicyGuard{All: m.GuardAll, Namespaces: slices.Clone(m.GuardNamespaces)}
}

// Remove deletes the policy table (the agent's --network-policy=false).
func (s *Sink) Remove() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.DeletePolicy()
}

// ApplyChange commits c as it is, outside the queue (benchmarks, tests).
func (s *Sink) ApplyChange(c *nft.PolicyChange) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.ApplyPolicy(c)
}

// Attached reports whether every one of ips is in the table's attached
// set (a CNI ADD recorded it): the check of a pod's admission
// (agent/policy's Admitter).
func (s *Sink) Attached(ips []netip.Addr) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, _, err := s.h.PolicySetAddrs(nft.PolicyAttached)
	if err != nil {
		return false, err
	}
	for _, a := range ips {
		if !slices.Contains(have, a.Unmap()) {
			return false, nil
		}
	}
	return true, nil
}
