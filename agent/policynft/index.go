package policynft

import (
	"encoding/json"
	"fmt"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/store"
)

// IndexTo makes the Sink record, in the node's store under dataDir ("":
// store.Dir's default), what the table's hashed names mean, with every
// change of the rules: `cnibox inspect policy` reads it.
func (s *Sink) IndexTo(dataDir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.indexDir, s.index = store.Dir(dataDir), true
}

// Index is the store's record of model m.
func Index(m *policy.Model) store.PolicyIndex {
	idx := store.PolicyIndex{Node: m.Node, Isolated: map[string]string{}}
	for _, dir := range []policy.Direction{policy.Ingress, policy.Egress} {
		t := m.Tiers(dir)
		if t.Isolated != "" {
			idx.Isolated[dir.String()] = string(t.Isolated)
		}
		for _, ps := range [][]*policy.Policy{t.Admin, t.NetworkPolicy, t.Baseline} {
			for _, p := range ps {
				e := store.PolicyEntry{ID: p.ID, Direction: dir.String(), Tier: p.Tier.String(), Priority: p.Priority,
					Subject: string(p.Subject), FailClosed: p.FailClosed, Rules: []store.PolicyRef{}}
				for _, r := range p.Rules {
					e.Rules = append(e.Rules, store.PolicyRef{ID: r.ID, Name: r.Name, Action: r.Action.String(), Counter: CounterName(r.ID)})
				}
				idx.Policies = append(idx.Policies, e)
			}
		}
	}
	idx.Rules, _ = json.Marshal(Rules(m)) // plain structs: never fails
	return idx
}

// writeIndex records m's index (s.mu held).
func (s *Sink) writeIndex(m *policy.Model) error {
	if !s.index {
		return nil
	}
	st, err := store.Open(s.indexDir)
	if err != nil {
		return fmt.Errorf("policy index: %w", err)
	}
	defer st.Close()
	return st.PutPolicyIndex(Index(m))
}
