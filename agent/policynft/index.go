package policynft

import (
	"fmt"

	"github.com/cnibox/cnibox/internal/policymodel"
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

// Index is the store's record of model m: its rules as they are.
func Index(m *policymodel.Model) store.PolicyIndex {
	return store.PolicyIndex{Node: m.Node, Rules: &m.Rules}
}

// writeIndex records m's index (s.mu held).
func (s *Sink) writeIndex(m *policymodel.Model) error {
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
