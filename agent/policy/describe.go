package policy

import (
	"net/netip"
	"sync"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// A logged verdict names its rule by the rule's counter ID (the table's
// log prefix, policymodel.LogPrefix); Describe turns that and the
// packet's addresses back into the policy, the rule and the pods, for
// the flow log's record.

// Attribution is what a logged verdict was about: the policy, rule and pods
// behind it (the verdict itself is the record's, flowlog.Verdict).
type Attribution struct {
	Direction policymodel.Direction
	// Policy is the deciding policy's ID ("np/<ns>/<name>",
	// "cnp/<name>"), Rule its rule's index; for a drop by a
	// NetworkPolicy's isolation Policy is "" and Isolating holds the IDs
	// of the NetworkPolicies that isolate the pod in the direction.
	Policy    string
	Tier      policymodel.Tier
	Rule      int
	Isolating []string
	// Default: the default allow, logged for the staged policies' pods
	// (no policy decided).
	Default  bool
	Src, Dst PodRef // zero: not a pod the engine knows
}

// PodRef names a pod.
type PodRef struct{ Namespace, Name string }

// snapshot is what a reader takes of the engine under the watcher's lock,
// cheaply (the model, which never changes, and the pods of the addresses
// it will ask about), and reads without the lock: Describe, the flow
// log's records and their staged evaluation.
type snapshot struct {
	node     string
	m        *policymodel.Model
	rulesGen uint64
	rules    *counterIndex
	pods     map[netip.Addr]PodRef
	// serviceOf names the Service port of a frontend (WatchConfig's
	// ServiceOf); nil: the flow log's service has the frontend only.
	serviceOf ServiceNamer
}

// ServiceNamer names the Service port that the frontend (the original
// destination of a connection of protocol proto, an IANA number) is.
type ServiceNamer func(proto uint8, frontend netip.AddrPort) (svcmodel.PortName, bool)

// snapshot takes the model and the pods of addrs.
func (e *Engine) snapshot(addrs ...netip.Addr) *snapshot {
	s := &snapshot{node: e.node, m: e.Model(), rulesGen: e.rulesGen, rules: e.rules, pods: make(map[netip.Addr]PodRef, len(addrs))}
	for _, a := range addrs {
		if r := e.podByIP(a); r != (PodRef{}) {
			s.pods[a] = r
		}
	}
	return s
}

// Describe describes a verdict the table logged with counter, for a packet
// from src to dst; ok is false for a counter the model has no rule of (a
// rule changed since the packet was logged).
func (e *Engine) Describe(counter string, src, dst netip.Addr) (v Attribution, ok bool) {
	return e.snapshot(src, dst).Describe(counter, src, dst)
}

// Describe is Engine.Describe on the snapshot.
func (s *snapshot) Describe(counter string, src, dst netip.Addr) (v Attribution, ok bool) {
	v.Src, v.Dst = s.pods[src], s.pods[dst]
	switch kind, dir := policymodel.ParseKey(counter); kind {
	case policymodel.KeyDefault:
		v.Default, v.Direction = true, dir
		return v, true
	case policymodel.KeyIsolation:
		v.Direction = dir
		self := dst
		if dir == policymodel.Egress {
			self = src
		}
		t := s.m.Tiers(v.Direction)
		for _, p := range t.NetworkPolicy {
			if set := s.m.Sets[p.Subject]; set != nil && set.Contains(self) {
				v.Isolating = append(v.Isolating, p.ID)
			}
		}
		return v, true
	}
	r, p := s.rules.ruleOf(s.rulesGen, &s.m.Rules, counter)
	if r == nil {
		return v, false
	}
	_, v.Direction, v.Rule, _ = r.ID.Split()
	v.Policy, v.Tier = p.ID, p.Tier
	return v, true
}

// ruleIn finds the rule with ID id in rs, and its policy.
func ruleIn(rs *policymodel.Rules, id policymodel.RuleID) (*policymodel.Rule, *policymodel.Policy) {
	for p, r := range rs.AllRules() {
		if r.ID == id {
			return r, p
		}
	}
	return nil, nil
}

// counterIndex is the rules of the engine's models by counter ID, made by
// the first reader that asks after a rebuild (the only change of the
// rules), outside the watcher's lock; safe for concurrent use.
type counterIndex struct {
	mu    sync.Mutex
	gen   uint64 // the engine's rulesGen it is of
	rules map[string]ruleRef
}

// ruleOf finds the rule with counter ID counter in rs (of rules
// generation gen), and its policy.
func (x *counterIndex) ruleOf(gen uint64, rs *policymodel.Rules, counter string) (*policymodel.Rule, *policymodel.Policy) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.rules == nil || x.gen != gen {
		x.rules, x.gen = map[string]ruleRef{}, gen
		for p, r := range rs.AllRules() {
			x.rules[r.ID.Key()] = ruleRef{r, p}
		}
	}
	ref := x.rules[counter]
	return ref.rule, ref.policy
}

type ruleRef struct {
	rule   *policymodel.Rule
	policy *policymodel.Policy
}

// podByIP is the pod that holds a, if the engine knows one (not
// host-network, not done). The index is made on the first call and kept
// from then on (flow log only: it costs a map entry per address).
func (e *Engine) podByIP(a netip.Addr) PodRef {
	if e.byIP == nil {
		e.byIP = map[netip.Addr]PodRef{}
		for _, pods := range e.nsPods {
			for _, p := range pods {
				e.indexIPs(nil, p)
			}
		}
	}
	return e.byIP[a]
}

// indexIPs moves a pod from old to p (either nil) in the address index,
// if there is one.
func (e *Engine) indexIPs(old, p *Pod) {
	if e.byIP == nil {
		return
	}
	if old.Selectable() {
		for _, a := range old.IPs {
			if e.byIP[a] == (PodRef{old.Namespace, old.Name}) {
				delete(e.byIP, a)
			}
		}
	}
	if p.Selectable() {
		for _, a := range p.IPs {
			e.byIP[a] = PodRef{p.Namespace, p.Name}
		}
	}
}
