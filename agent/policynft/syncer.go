// Package policynft is the kernel side of cnibox-agent's NetworkPolicy
// and MultiNetworkPolicy engines: the one syncer of the policy tables. Its
// inputs are the NetworkPolicy engine's model and changes
// (policymodel.Delta), handed over by the watcher, and the tables of the
// node's pods that MultiNetworkPolicies isolate (pods.go); one loop (Run)
// commits what is queued whenever the last transaction is done, tries a
// failure again after a growing wait, replaces every table on a period
// (putting back what someone else changed), and keeps the numbers the
// agent's metrics show.
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

// Syncer applies the model to the policy table of one namespace (the
// node's), and the MultiNetworkPolicy tables to the pods' namespaces. It
// is safe for concurrent use. Apply queues each change with its model;
// until Run starts, Apply commits it at once (tests, a node without the
// loop), and from then on Run's goroutine commits what was queued, as one
// transaction, whenever the last one is done (run.go).
//
// The model is handed over, never read back (handoff): Apply and Offer
// leave the model with the Syncer, which takes it when it makes a
// transaction without the watcher's lock; Withdraw, which the watcher
// calls before the engine changes the model, takes it back and reports
// whether the Syncer kept it, in which case the engine copies on write
// (agent/policy's cow.go) instead of changing it in place. The Syncer
// keeps a model for a full sync (and the DNS side for its evaluations),
// and only borrows it for a delta's transaction, copying the delta's sets
// (take): a model is handed out at most once per transaction, and a
// change costs the engine what it did when the Syncer read the model
// under the watcher's lock.
type Syncer struct {
	mu     sync.Mutex // the nftables handle, stats, rules, pod tables
	h      *nft.Handle
	synced atomic.Bool // a full sync is in the kernel
	stats  Stats
	rules  map[string]ruleInfo // by counter name
	// live: the addresses the last transaction placed (localAddrs); those
	// the next model no longer has are closed (nft.PolicyChange.ToPending).
	live []netip.Addr
	// index: record the store's policy index in indexDir (IndexTo).
	index    bool
	indexDir string
	// pods: the MultiNetworkPolicy input (pods.go).
	pods podTables

	qmu   sync.Mutex // q, async, done, doneCh, the handoff
	q     queue
	async bool          // Run is committing
	kick  chan struct{} // Run's wake-up (one pending at most)
	// done is the number of the last change committed; doneCh is closed
	// (and replaced) whenever it moves (Wait).
	done   uint64
	doneCh chan struct{}
	resync time.Duration // ResyncEvery
	// The handoff: offered is the model handed over and not withdrawn
	// (nil: none, or withdrawn while the engine changes it); kept is the
	// last model the Syncer claimed, which never changes; claimed reports
	// whether it claimed offered since it was offered (Withdraw's answer).
	offered, kept *policymodel.Model
	claimed       bool
	// borrowed: Run is making a delta's change of offered (take); returned
	// is signalled when it is done (Withdraw waits for it).
	borrowed bool
	returned sync.Cond
	// beforeCommit, if set (tests), runs before each transaction, outside
	// every lock.
	beforeCommit func()
	// dns, if set (WithDNS), follows the model's domainNames peers.
	dns *DNS
}

// WithDNS has the Syncer keep d's DNS table to each model it is handed,
// and hand d the models it is handed (domainNames: dns.go). Call it before
// the first Apply.
func (s *Syncer) WithDNS(d *DNS) {
	s.dns = d
	d.setModel(s.model)
}

// Stats are the Syncer's numbers for the agent's metrics.
type Stats struct {
	Rules, Sets int           // model rules and sets of the last change
	Changes     int           // changes handed to Apply (counted by the queue: Apply never waits for a transaction)
	Applied     int           // transactions committed
	Failed      int           // transactions the kernel refused
	Resyncs     int           // periodic full syncs committed (ResyncEvery)
	IndexErr    error         // the last failure to record the store's index
	LastSync    time.Duration // the last transaction's time
	PodTables   int           // pod tables written (MultiNetworkPolicy)
	PodFailed   int           // pod tables that could not be written
}

// New returns a Syncer on the namespace at nsPath ("" for the caller's).
func New(nsPath string) (*Syncer, error) {
	h, err := nft.Open(nsPath)
	if err != nil {
		return nil, err
	}
	return NewOn(h), nil
}

// NewOn returns a Syncer on h (a test's Handle on netops/nft/nftfake's
// kernel, say), as New does on a namespace's.
func NewOn(h *nft.Handle) *Syncer {
	s := &Syncer{h: h, kick: make(chan struct{}, 1), doneCh: make(chan struct{}), pods: newPodTables()}
	s.returned.L = &s.qmu
	return s
}

// Close closes the nftables connection; the table stays (fail closed: the
// kernel enforces the last rules while the agent is away).
func (s *Syncer) Close() error { return s.h.Close() }

// Stats returns the Syncer's numbers.
func (s *Syncer) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	s.qmu.Lock()
	st.Changes = int(s.q.n)
	s.qmu.Unlock()
	return st
}

// Apply takes d, the change that made m, and queues it with m. Called
// with the model's lock held; the model is the Syncer's to take until
// Withdraw. The first transaction replaces the whole table (what an
// earlier agent left is kept until then); later ones change what the
// queued deltas say. Until Run starts, Apply commits before it returns,
// and returns the commit's error; then it only queues (Run logs a failure
// and tries again).
func (s *Syncer) Apply(m *policymodel.Model, d policymodel.Delta) error {
	return s.queue(m, d, false)
}

// Full hands over the whole model of a new engine (the watcher's first
// sync, also when it watches again from the start): the next transaction
// replaces the whole table, whatever the last one left.
func (s *Syncer) Full(m *policymodel.Model) error {
	return s.queue(m, policymodel.Delta{Rules: true}, true)
}

func (s *Syncer) queue(m *policymodel.Model, d policymodel.Delta, full bool) error {
	var dnsErr error
	if s.dns != nil {
		dnsErr = s.dns.observe(m)
	}
	s.qmu.Lock()
	s.q.merge(d)
	if full {
		s.q.requeue()
	}
	s.offered, s.claimed = m, false
	async := s.async
	s.qmu.Unlock()
	if async {
		s.wake()
		return dnsErr
	}
	if err := s.sync(false); err != nil { // committed before Apply returns
		return err
	}
	return dnsErr
}

// Offer hands m over without a change to commit: the model after a
// change whose delta is empty (the engine changed what no table holds).
func (s *Syncer) Offer(m *policymodel.Model) {
	s.qmu.Lock()
	s.offered, s.claimed = m, false
	dirty := s.q.dirty
	s.qmu.Unlock()
	if dirty {
		s.wake() // a take waited for the model
	}
}

// Withdraw takes back the model handed over, before its engine changes
// it, and reports whether the Syncer (or the DNS side) claimed it: then
// it is kept, and the engine must not change it in place. Called with the
// model's lock held.
func (s *Syncer) Withdraw() (kept bool) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	for s.borrowed {
		s.returned.Wait() // Run copies what a delta holds of it
	}
	kept = s.claimed
	s.offered, s.claimed = nil, false
	return kept
}

// claimLocked is the model the Syncer may keep (s.qmu held): the one
// offered, claimed now, or the last claimed when none was offered since;
// nil while the engine changes the model it had offered (withdrawn: its
// Apply or Offer follows) and before any.
func (s *Syncer) claimLocked() *policymodel.Model {
	switch {
	case s.offered != nil:
		s.kept, s.claimed, s.offered = s.offered, true, nil
		return s.kept
	case s.claimed: // nothing offered since the last claim: it is the model
		return s.kept
	}
	return nil
}

// model is the newest model the DNS side may read without any lock: the
// one offered, claimed, or else the last claimed (nil before any).
func (s *Syncer) model() *policymodel.Model {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if m := s.claimLocked(); m != nil {
		return m
	}
	return s.kept
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
// addresses stay closed until their DEL (nft.PolicyChange.ToPending).
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
func (s *Syncer) Remove() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.DeletePolicy()
}

// ApplyChange commits c as it is, outside the queue (benchmarks, tests).
func (s *Syncer) ApplyChange(c *nft.PolicyChange) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.ApplyPolicy(c)
}

// Attached reports whether every one of ips is in the table's attached
// set (a CNI ADD recorded it): the check of a pod's admission
// (agent/policy's Admitter).
func (s *Syncer) Attached(ips []netip.Addr) (bool, error) {
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
